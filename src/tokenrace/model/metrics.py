"""One declaration per summary metric (`Summary.metrics`): its name, unit, definition, which
requests it pools, how it is computed from a settled `RequestRecord`, and how the tables show it;
and one per figure a summary section holds once (`SectionFigure`: throughput, speculative decoding,
energy, embeddings and rerank, content, structured output, the error rate, the prefix cache,
goodput, cost, the speed-of-light efficiency, the Artificial Analysis reference).

`figures.summary.summarize` fills `Metrics` from these; every renderer reads a declared figure's
label, unit and digits from here: the summary table, the headline and the step tables
(`report/tables.py`, `report/headline.py`, also the HTML report's), `compare`'s rows
(`report/compare.py`), `watch`'s (`report/watch.py`) and the run history's (`report/history.py`).
`tests/figures/test_metric_declarations.py` ties them to the `Metrics` fields and summary.json,
`tests/test_docs.py` to docs/metrics.md's rows. The fields of `Metrics` stay declared in
`model/summary.py` so that pydantic reads summary.json and mypy checks `summary.metrics.ttft_ms`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tokenrace.model.records import RequestRecord

# Which measured requests a metric pools: those that succeeded, or all of them (a figure of the
# send, such as the connection time, is defined for a failed request too).
Over = Literal["succeeded", "measured"]


@dataclass(frozen=True, slots=True)
class Display:
    """How every table shows a figure: its label, the unit it prints and its digits. A unit of "%"
    shows a fraction in per cent, one of "×" a ratio and one of "$" a price after that sign; each
    keeps its sign in a column of its own. Any other unit follows the number ("ms", "% of bound":
    a figure saved in per cent already). `column` is a step table's header where the label and
    unit are too wide for one ("tok/s"); the label when empty."""

    label: str
    unit: str
    digits: int = 1
    column: str = ""

    @property
    def header(self) -> str:
        return self.column or self.label


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # the field of `Metrics`: summary.json's `metrics.<name>`
    unit: str  # as docs/metrics.md's "summary metric" table writes it
    definition: str  # one line; docs/metrics.md has the full definition
    over: Over
    # The figure of one settled record, None where undefined. None for a metric that pools
    # several values per request (gaps between chunks, tokens per chunk): `summarize`
    # (figures/summary.py) computes those over the records, by name.
    value: Callable[[RequestRecord], float | None] | None
    display: Display | None = None  # None: not a row of the summary table
    # Needs a streamed answer (a first token, chunks): null in a run whose answers came in one body
    # (no-stream, embeddings, rerank), and `not_measured` says why.
    streamed: bool = False

    @property
    def displayed(self) -> Display:
        """Its display; a metric kept out of the summary table has none to show."""
        if self.display is None:
            raise ValueError(f"{self.name} declares no display")
        return self.display

    def label(self, stat: str) -> str:
        """A statistic's label, as every table and headline writes it: "TTFT p50"."""
        return f"{self.displayed.label} {stat}"


# In the order of the summary table's rows; the rest after them.
METRICS: tuple[Metric, ...] = (
    Metric(
        "ttft_ms",
        "ms",
        "first content chunk - start",
        "succeeded",
        value=lambda r: r.ttft_ms,
        display=Display("TTFT", "ms"),
        streamed=True,
    ),
    Metric(
        "ttfa_ms",
        "ms",
        "first chunk with answer content (not reasoning, not a tool call) - start",
        "succeeded",
        value=lambda r: r.ttfa_ms,
        display=Display("TTFT answer", "ms"),
        streamed=True,
    ),
    Metric(
        "tpot_ms",
        "ms",
        "(last content chunk - first) / (output tokens - 1)",
        "succeeded",
        value=lambda r: r.tpot_ms,
        display=Display("TPOT", "ms", 2),
        streamed=True,
    ),
    Metric(
        "itl_chunk_ms",
        "ms",
        "every gap between consecutive content chunks",
        "succeeded",
        value=None,
        display=Display("ITL (chunk)", "ms"),
        streamed=True,
    ),
    Metric(
        "itl_token_ms",
        "ms/token",
        "each chunk gap / the tokens of the chunk that ends it, weighted by them",
        "succeeded",
        value=None,
        display=Display("ITL (token)", "ms"),
        streamed=True,
    ),
    Metric(
        "e2e_ms",
        "ms",
        "end of the stream (or body) - start",
        "succeeded",
        value=lambda r: r.e2e_ms,
        display=Display("E2E", "ms"),
    ),
    Metric(
        "schedule_lag_ms",
        "ms",
        "open loop: start - intended start",
        "measured",
        value=lambda r: r.schedule_lag_ms,
        display=Display("Schedule lag", "ms"),
    ),
    Metric(
        "output_tokens",
        "tokens",
        "output tokens of a request",
        "succeeded",
        value=lambda r: r.output_tokens,
        display=Display("Output tokens", "tok"),
    ),
    Metric(
        "prompt_tokens",
        "tokens",
        "prompt tokens of a request",
        "succeeded",
        value=lambda r: r.prompt_tokens,
        display=Display("Prompt tokens", "tok"),
    ),
    Metric(
        "cached_tokens",
        "tokens",
        "prompt tokens the server took from its prefix cache",
        "succeeded",
        value=lambda r: r.cached_tokens,
        display=Display("Cached tokens", "tok"),
    ),
    Metric(
        "tokens_per_chunk",
        "tokens",
        "tokens each content chunk carried",
        "succeeded",
        value=None,
        display=Display("Tokens/chunk", "tok"),
        streamed=True,
    ),
    Metric(
        "connect_ms",
        "ms",
        "time to open a new connection (TCP + TLS)",
        "measured",
        value=lambda r: r.connect_ms,
    ),
    Metric(
        "client_prep_ms",
        "ms",
        "start - begin - connect_ms: the client's own time to send the request",
        "measured",
        value=lambda r: r.client_prep_ms,
    ),
    Metric(
        "ttft_from_intended_ms",
        "ms",
        "open loop: first content chunk - intended send time",
        "succeeded",
        value=lambda r: r.ttft_from_intended_ms,
    ),
    Metric(
        "e2e_from_intended_ms",
        "ms",
        "open loop: end of the stream - intended send time",
        "succeeded",
        value=lambda r: r.e2e_from_intended_ms,
    ),
)

STREAMED = tuple(m.name for m in METRICS if m.streamed)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
TTFT, TPOT, ITL_CHUNK, E2E = (BY_NAME[n] for n in ("ttft_ms", "tpot_ms", "itl_chunk_ms", "e2e_ms"))


@dataclass(frozen=True, slots=True)
class SectionFigure:
    """One number a summary holds once, not per request, mostly in a section of its own
    (throughput, speculative decoding, energy, embeddings and rerank, content, structured output,
    the prefix cache, goodput, cost, efficiency, a reference's figures; the error rate at the top):
    its path in summary.json, unit, definition and how the tables and headline show it."""

    name: str  # its path in summary.json: "energy.output_tokens_per_joule"
    unit: str  # as docs/metrics.md's row writes it
    definition: str  # one line; docs/metrics.md has the full definition
    display: Display

    @property
    def displayed(self) -> Display:
        return self.display


THROUGHPUT = SectionFigure(
    "throughput.output_tokens_per_s",
    "tokens/s",
    "output tokens of succeeded requests ÷ window",
    Display("throughput", "output tok/s", column="tok/s"),
)
ACCEPTANCE_RATE = SectionFigure(
    "speculative.acceptance_rate",
    "fraction",
    "accepted ÷ draft tokens",
    Display("speculative decoding", "%", column="accept"),
)
TOKENS_PER_STEP = SectionFigure(
    "speculative.tokens_per_step",
    "tokens",
    "1 + accepted ÷ drafts: tokens each verification step emits",
    Display("tokens per step", "tokens per step", 2),
)
TOKENS_PER_JOULE = SectionFigure(
    "energy.output_tokens_per_joule",
    "tokens/J",
    "output tokens ÷ joules over the window",
    Display("energy", "output tok/J", 2, column="tok/J"),
)
JOULES = SectionFigure("energy.joules", "J", "GPU energy over the window, all GPUs", Display("energy", "J"))
ENERGY_WINDOW = SectionFigure("energy.window_s", "s", "between the first and the last reading", Display("over", "s", 2))
MEAN_POWER = SectionFigure("energy.mean_power_w", "W", "joules ÷ window", Display("mean power", "W"))
INPUTS_PER_S = SectionFigure(
    "pooling.inputs_per_s",
    "texts/s",
    "embeddings: inputs of succeeded requests ÷ window",
    Display("throughput", "inputs/s", 2),
)
DOCUMENTS_PER_S = SectionFigure(
    "pooling.documents_per_s",
    "texts/s",
    "rerank: documents of succeeded requests ÷ window",
    Display("throughput", "documents/s", 2),
)
INPUT_TOKENS_PER_S = SectionFigure(
    "pooling.input_tokens_per_s",
    "tokens/s",
    "prompt tokens of succeeded requests ÷ window",
    Display("input tokens", "input tok/s", column="in tok/s"),
)
CONTENT_RATIO = SectionFigure(
    "content.ratio",
    "ratio",
    "TPOT p50 of the slowest kind of content ÷ that of the fastest",
    Display("slowest ÷ fastest", "×", 2),
)
SCHEMA_VALID_RATE = SectionFigure(
    "structured_output.valid_rate", "fraction", "valid ÷ checked answers", Display("response schema", "%")
)
ERROR_RATE = SectionFigure(
    "error_rate", "fraction", "failed ÷ measured requests", Display("error rate", "%", column="errors")
)
CACHE_HIT_RATE = SectionFigure(
    "cache.hit_rate",
    "fraction",
    "Σ cached ÷ Σ prompt tokens of the succeeded requests that reported both",
    Display("prefix cache hit rate", "%", 0, column="cached"),
)
GOODPUT = SectionFigure(
    "goodput.requests_per_s",
    "requests/s",
    "succeeded requests meeting every SLO ÷ window",
    Display("goodput", "req/s", 2),
)
GOODPUT_SHARE = SectionFigure(
    "goodput.fraction", "fraction", "requests meeting every SLO ÷ measured requests", Display("within SLO", "%")
)
# Cost, from a price per token or per GPU-hour (figures/cost.py).
COST_PER_M_OUTPUT = SectionFigure(
    "cost.usd_per_million_output_tokens",
    "$",
    "the price of the run ÷ its output tokens × 10⁶",
    Display("cost per million output tokens", "$", 4, column="$/M out tok"),
)
COST_PER_1K_REQUESTS = SectionFigure(
    "cost.usd_per_1k_requests",
    "$",
    "the price of the run ÷ its succeeded requests × 1000",
    Display("cost per 1k requests", "$", 4),
)
COST_TOTAL = SectionFigure(
    "cost.usd_total", "$", "API price: the tokens of the succeeded requests, priced", Display("cost", "$", 4)
)
COST_PER_HOUR = SectionFigure(
    "cost.usd_per_hour", "$/h", "GPUs: price per GPU-hour × GPUs", Display("cost per hour", "$", 2)
)
# The run against the planner's speed of light (figures/efficiency.py), saved in per cent.
DECODE_EFFICIENCY = SectionFigure(
    "efficiency.decode_pct_of_bound",
    "%",
    "1000 ÷ TPOT p50 ÷ the per-stream decode bound × 100",
    Display("decode efficiency", "% of bound"),
)
TTFT_EFFICIENCY = SectionFigure(
    "efficiency.ttft_pct_of_bound", "%", "the TTFT bound ÷ TTFT p50 × 100", Display("TTFT efficiency", "% of bound")
)
AGGREGATE_EFFICIENCY = SectionFigure(
    "efficiency.aggregate_pct_of_bound",
    "%",
    "output tokens/s ÷ the aggregate bound × 100",
    Display("aggregate efficiency", "% of bound"),
)
# Artificial Analysis' figures (`--profile aa`), of which a watch follows the P50s (report/watch.py).
AA_OUTPUT_SPEED = SectionFigure(
    "reference.aa.output_speed_tok_s",
    "tokens/s",
    "tokens after the first ÷ the time after the first, per request",
    Display("output speed", "tok/s", column="tok/s"),
)
AA_TTFT = SectionFigure(
    "reference.aa.ttft_s", "s", "send → first content chunk, per request", Display("TTFT", "s", 3, column="TTFT s")
)
AA_E2E_100 = SectionFigure(
    "reference.aa.e2e_100_tokens_s",
    "s",
    "TTFT + 100 ÷ output speed, per request",
    Display("end-to-end for 100 tokens", "s", 3),
)

FIGURES: tuple[SectionFigure, ...] = (
    THROUGHPUT,
    ACCEPTANCE_RATE,
    TOKENS_PER_STEP,
    TOKENS_PER_JOULE,
    JOULES,
    ENERGY_WINDOW,
    MEAN_POWER,
    INPUTS_PER_S,
    DOCUMENTS_PER_S,
    INPUT_TOKENS_PER_S,
    CONTENT_RATIO,
    SCHEMA_VALID_RATE,
    ERROR_RATE,
    CACHE_HIT_RATE,
    GOODPUT,
    GOODPUT_SHARE,
    COST_PER_M_OUTPUT,
    COST_PER_1K_REQUESTS,
    COST_TOTAL,
    COST_PER_HOUR,
    DECODE_EFFICIENCY,
    TTFT_EFFICIENCY,
    AGGREGATE_EFFICIENCY,
    AA_OUTPUT_SPEED,
    AA_TTFT,
    AA_E2E_100,
)
