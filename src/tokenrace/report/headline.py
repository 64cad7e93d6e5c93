"""A run's headline, declared once: which figures lead, in what order, with their labels, units and
the figures that qualify them. The terminal prints it under the summary table, one line per figure
("label: value · detail"); the HTML report shows the same figures as its "Key numbers" cards.

A sweep's headline (its steps, knee, peak throughput, content, prefill fit and goodput search) is
declared here too, for the sweep page's cards and the lines under the terminal's step table.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from tokenrace.model.metrics import (
    ACCEPTANCE_RATE,
    CACHE_HIT_RATE,
    CONTENT_RATIO,
    COST_PER_1K_REQUESTS,
    COST_PER_M_OUTPUT,
    DOCUMENTS_PER_S,
    E2E,
    ENERGY_WINDOW,
    ERROR_RATE,
    INPUT_TOKENS_PER_S,
    INPUTS_PER_S,
    JOULES,
    MEAN_POWER,
    THROUGHPUT,
    TOKENS_PER_JOULE,
    TOKENS_PER_STEP,
    TPOT,
    TTFT,
    Metric,
    SectionFigure,
)
from tokenrace.model.run import Knee, ProfileFile, SweepFile
from tokenrace.model.sections import ContentSpeed, Energy, Speculative
from tokenrace.model.summary import Cache, Cost, PriceBasis, Summary
from tokenrace.stats import CONFIDENCE, requests_needed
from tokenrace.table import Cell, pct, text

SEPARATOR = " · "  # between a figure's qualifying parts, on the terminal and on a card alike


@dataclass(frozen=True, slots=True)
class Figure:
    """One headline figure: what it is, its value (with its unit), and what qualifies it."""

    label: str
    value: Cell
    detail: str = ""

    @property
    def line(self) -> str:
        """The figure as the terminal prints it."""
        return f"{self.label}: {self.value.text}" + (f"{SEPARATOR}{self.detail}" if self.detail else "")


def _detail(*parts: str | None) -> str:
    return SEPARATOR.join(p for p in parts if p)


# --- a declared figure (model/metrics.py), as every table and line shows it ----------------------

Declared = Metric | SectionFigure
SIGNS = ("×", "$")  # units written before the number: a ratio, a price


def shown(figure: Declared, value: float | None, bare: bool = False) -> Cell:
    """A declared figure as its declaration shows it: its digits, and its unit after it (a fraction
    in per cent, a ratio after "×", a price after "$"). `bare`: the unit stands in a header or a
    column of its own; a per cent keeps its "%", a ratio its "×" and a price its "$"."""
    d = figure.displayed
    if d.unit == "%":
        return pct(value, d.digits)
    if d.unit in SIGNS:
        return Cell(value, d.digits, prefix=d.unit)
    return Cell(value, d.digits, suffix="" if bare else f" {d.unit}")


def said(figure: Declared, value: float | None) -> str:
    """The same in a line of text, where the unit follows even a missing value ("— J")."""
    d = figure.displayed
    return shown(figure, value).text if d.unit in ("%", *SIGNS) else f"{Cell(value, d.digits).text} {d.unit}"


def named(figure: Declared, value: float | None) -> str:
    """The same after the figure's label: "decode efficiency 45.1 % of bound"."""
    return f"{figure.displayed.label} {said(figure, value)}"


def knee_text(knee: Knee) -> str:
    """A sweep's knee in a few words: its step and throughput, "c8 (1,234.5 output tok/s)"."""
    return f"{knee.step} ({said(THROUGHPUT, knee.throughput_tokens_per_s)})"


# --- a run --------------------------------------------------------------------------------------


def run_headline(summary: Summary, cost: Cost | None = None, bound: float | None = None) -> list[Figure]:
    """The run's headline: latency, throughput, requests, then what the run's speed rests on (prefix
    cache, speculative decoding beside TPOT, energy, content) and its cost. `cost` defaults to the
    one the run saved; `bound` is the speed of light in output tokens/s, when known."""
    m = summary.metrics
    return [
        Figure(TTFT.label("p50"), shown(TTFT, m.ttft_ms.p50), f"p95 {shown(TTFT, m.ttft_ms.p95).text}"),
        Figure(TPOT.label("p50"), shown(TPOT, m.tpot_ms.p50), f"p95 {shown(TPOT, m.tpot_ms.p95).text}"),
        *_speculative(summary.speculative),
        Figure(E2E.label("p95"), shown(E2E, m.e2e_ms.p95), f"p50 {shown(E2E, m.e2e_ms.p50).text}"),
        _throughput(summary, bound),
        _requests(summary),
        *_cache(summary.cache),
        *_energy(summary.energy),
        *_content(summary.content),
        *_cost(cost if cost is not None else summary.cost),
    ]


def _speculative(spec: Speculative | None) -> list[Figure]:
    """Beside TPOT: the engine's own acceptance, which moves TPOT with the content."""
    if spec is None or spec.acceptance_rate is None:
        return []
    steps = spec.tokens_per_step
    per_step = said(TOKENS_PER_STEP, steps) if steps is not None else None
    return [
        Figure(
            ACCEPTANCE_RATE.display.label,
            shown(ACCEPTANCE_RATE, spec.acceptance_rate),
            _detail(per_step, f"accepted ÷ draft tokens ({spec.source})"),
        )
    ]


def _throughput(summary: Summary, bound: float | None) -> Figure:
    tp, pooling = summary.throughput, summary.pooling
    over = f"{Cell(tp.requests_per_s, 2).text} req/s over {Cell(tp.window_s, 2).text} s"
    if pooling is not None:
        # Embeddings and rerank generate nothing: their work is the inputs (documents) and their tokens.
        if pooling.api == "embeddings":
            items = shown(INPUTS_PER_S, pooling.inputs_per_s)
        else:
            items = shown(DOCUMENTS_PER_S, pooling.documents_per_s)
        dim = f"vectors of {pooling.embedding_dim} dimensions" if pooling.embedding_dim else None
        return Figure(
            THROUGHPUT.display.label, items, _detail(said(INPUT_TOKENS_PER_S, pooling.input_tokens_per_s), over, dim)
        )
    light = None
    if bound and tp.output_tokens_per_s:
        light = f"{Cell(tp.output_tokens_per_s / bound, 0, scale=100.0).text} % of speed of light"
    steady = f"steady {Cell(tp.steady_output_tokens_per_s).text} tok/s"
    return Figure(THROUGHPUT.display.label, shown(THROUGHPUT, tp.output_tokens_per_s), _detail(over, steady, light))


def _requests(summary: Summary) -> Figure:
    req = summary.requests
    kinds = ", ".join(f"{k} x{n}" for k, n in summary.errors_by_kind.items())
    return Figure(
        "requests",
        text(f"{req.succeeded}/{req.total} ok"),
        _detail(
            named(ERROR_RATE, summary.error_rate),
            f"errors: {kinds}" if kinds else None,
            f"cancelled by the client: {req.cancelled}" if req.cancelled else None,
        ),
    )


def _cache(c: Cache | None) -> list[Figure]:
    """The prefix cache's share of the prompt, and whether prompts were busted; nothing when unknown."""
    if c is None:
        return []
    busted = {True: "prompts busted (a unique prefix per request)", False: "prompts not busted", None: None}[c.busted]
    server = c.server
    engine = None
    if server is not None and server.hit_rate is not None:
        engine = f"engine's own counters {said(CACHE_HIT_RATE, server.hit_rate)} ({server.source})"
    label = CACHE_HIT_RATE.display.label
    if c.hit_rate is None:
        return [Figure(label, text("not reported"), _detail("the server did not report cached tokens", busted, engine))]
    share = f"{Cell(c.cached_tokens).text} of {Cell(c.prompt_tokens).text} prompt tokens cached, from {_source_text(c.source)}"
    return [Figure(label, shown(CACHE_HIT_RATE, c.hit_rate), _detail(share, busted, engine))]


def _source_text(source: dict[str, int] | str | None) -> str:
    if isinstance(source, dict):
        return ", ".join(f"{k} x{v}" for k, v in source.items())
    return source or "—"


def _energy(energy: Energy | None) -> list[Figure]:
    if energy is None:
        return []
    if energy.output_tokens_per_joule is None:
        return [Figure(TOKENS_PER_JOULE.display.label, text("not measured"), energy.reason or "")]
    return [
        Figure(
            TOKENS_PER_JOULE.display.label,
            shown(TOKENS_PER_JOULE, energy.output_tokens_per_joule),
            _detail(
                f"{said(JOULES, energy.joules)} over {said(ENERGY_WINDOW, energy.window_s)} "
                f"on {len(energy.gpus)} GPU(s)",
                f"mean {said(MEAN_POWER, energy.mean_power_w)}",
                f"{energy.source}, {energy.method or 'method unknown'}",
            ),
        )
    ]


def _content(content: ContentSpeed | None) -> list[Figure]:
    if content is None or not content.kinds:
        return []
    kinds = ", ".join(f"{k} {shown(TPOT, v.tpot_ms_p50).text}" for k, v in content.kinds.items())
    ratio = named(CONTENT_RATIO, content.ratio) if content.ratio is not None else None
    return [Figure(f"{TPOT.label('p50')} by content", text(kinds), _detail(ratio, content.verdict))]


def _cost(c: Cost | None) -> list[Figure]:
    if c is None:
        return []
    per_k = named(COST_PER_1K_REQUESTS, c.usd_per_1k_requests)
    return [
        Figure(
            COST_PER_M_OUTPUT.display.label,
            shown(COST_PER_M_OUTPUT, c.usd_per_million_output_tokens),
            _detail(per_k, basis(c)),
        )
    ]


def basis(c: Cost) -> str:
    """What a cost rests on: the GPUs and their hourly price, or the API's price per token."""
    if c.basis == "gpu" and c.gpu is not None:
        g = c.gpu
        return f"{g.gpus} GPU(s) at {Cell(g.usd_per_gpu_hour, 2, prefix='$').text}/GPU-hour at the measured throughput"
    p = c.price or PriceBasis()
    when = f", {p.date}" if p.date else ""
    return f"{Cell(p.input_per_m, 3, prefix='$').text} in / {Cell(p.output_per_m, 3, prefix='$').text} out per M tokens ({p.source}{when})"


# --- a sweep or a profile -----------------------------------------------------------------------


def sweep_headline(s: SweepFile | ProfileFile) -> list[Figure]:
    """A sweep's (or the embedded profile's) headline: its steps and why it stopped, the knee (and
    its cost, from the knee's step row when priced), the peak throughput, and what the sweep found
    besides (content, prefill, goodput)."""
    figures = [Figure("steps", Cell(len(s.steps)), _stopped(s)), *_knee(s)]
    # The figure the step table beside it shows: a sweep compares steady throughput between steps,
    # the profile's table shows each step's output tokens over its window.
    if isinstance(s, SweepFile):
        values = [r.throughput_tokens_per_s for r in s.steps]
    else:
        values = [r.output_tokens_per_s for r in s.steps]
    best = max((v for v in values if v is not None), default=None)
    figures.append(Figure(f"peak {THROUGHPUT.display.label}", shown(THROUGHPUT, best)))
    figures += _tails(s)
    if not isinstance(s, SweepFile):
        return figures
    figures += _content(s.content)
    p = s.prefill
    if p is not None:
        fit = f"{TTFT.displayed.label} = {shown(TTFT, p.intercept_ms).text} + {Cell(p.slope_ms_per_token, 4).text} ms/token"
        points = f"R² {Cell(p.r2, 3).text} ({p.points} points)"
        figures.append(Figure("prefill", Cell(p.prefill_tokens_per_s, suffix=" tok/s"), _detail(fit, points)))
    g = s.goodput_search
    if g is not None:
        share = f"meeting {g.slo} for ≥{pct(g.attainment or 0, 0).text} of requests"
        bracket = f"bracket [{Cell(g.lower, 3).text}, {Cell(g.upper, 3).text}], {g.probes} probes ({g.reason})"
        figures.append(Figure("max goodput rate", Cell(g.best_rate, 3, suffix=" req/s"), _detail(share, bracket)))
    return figures


def _tails(s: SweepFile | ProfileFile) -> list[Figure]:
    """The step table shows p95s; a step with fewer requests than bound a p95 says so, with the count
    that would (docs/metrics.md, "Intervals"): a p95 of 10 requests is little more than their largest."""
    counts = [r.requests.succeeded for r in s.steps if r.requests.succeeded]
    needed = requests_needed(0.95, CONFIDENCE)
    if not counts or min(counts) >= needed:
        return []
    fewest, most = min(counts), max(counts)
    span = f"{fewest}" if fewest == most else f"{fewest} to {most}"
    detail = f"a p95 needs {needed} requests, a p99 {requests_needed(0.99, CONFIDENCE)}, at {CONFIDENCE * 100:g} % confidence"
    return [Figure("tail percentiles", text(f"unbounded: steps of {span} requests"), detail)]


def _stopped(s: SweepFile | ProfileFile) -> str:
    if isinstance(s, ProfileFile):
        engine = s.engine.engine if s.engine else None
        steps = ", ".join(r.step for r in s.steps) or "no step"
        return f"the fixed profile: {steps}{f' on {engine}' if engine else ''}"
    return f"stopped: {s.stop_reason or 'no reason recorded (an older sweep.json)'}"


def _knee(s: SweepFile | ProfileFile) -> list[Figure]:
    if not isinstance(s, SweepFile):  # the profile is a fixed ramp: no knee is looked for
        return []
    knee = s.knee
    if knee is None:
        if s.sweep not in ("concurrency", "rate") or not s.steps:
            return []
        if s.stop_reason == "completed":
            return [Figure("knee", text("not reached"), "throughput still grew at the last step")]
        return [Figure("knee", text("none"), f"{s.stop_reason} at the first step")]
    at = f"concurrency {knee.concurrency}" if s.sweep == "concurrency" else f"rate {Cell(knee.rate, 2).text} req/s"
    figures = [
        Figure(
            "knee",
            text(knee.step),
            _detail(
                at,
                said(THROUGHPUT, knee.throughput_tokens_per_s),
                f"{E2E.label('p95')} {shown(E2E, knee.e2e_p95_ms).text}",
                knee.reason,
            ),
        )
    ]
    cost = next((r.cost for r in s.steps if r.step == knee.step and r.cost is not None), None)
    usd = cost.usd_per_million_output_tokens if cost is not None else knee.usd_per_million_output_tokens
    if usd is not None:
        label = f"{COST_PER_M_OUTPUT.display.label} at the knee"
        figures.append(Figure(label, shown(COST_PER_M_OUTPUT, usd), basis(cost) if cost else ""))
    return figures


# --- renderers ----------------------------------------------------------------------------------


def to_lines(figures: Sequence[Figure]) -> list[str]:
    """The headline as the terminal prints it: one line per figure."""
    return [f.line for f in figures]


def to_cards(figures: Sequence[Figure]) -> str:
    """The headline as the HTML report's cards: label, value, detail."""
    out = []
    for f in figures:
        detail = f"<div class='sub'>{html.escape(f.detail)}</div>" if f.detail else ""
        out.append(
            f"<div class='card'><div class='label'>{html.escape(f.label)}</div>"
            f"<div class='value'>{html.escape(f.value.text)}</div>{detail}</div>"
        )
    return f"<div class='cards'>{''.join(out)}</div>"
