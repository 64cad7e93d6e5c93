"""summary.json: every figure of one run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from tokenrace.model.base import _Model
from tokenrace.model.drift import Drift
from tokenrace.model.monitor import Resources
from tokenrace.model.reference import ReferenceFigures
from tokenrace.model.sections import ContentSpeed, Energy, Speculative
from tokenrace.model.stats import Stats


class RequestCounts(_Model):
    total: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0


class Metrics(_Model):
    ttft_ms: Stats = Field(default_factory=Stats)
    ttfa_ms: Stats = Field(default_factory=Stats)
    tpot_ms: Stats = Field(default_factory=Stats)
    itl_chunk_ms: Stats = Field(default_factory=Stats)
    itl_token_ms: Stats = Field(default_factory=Stats)
    e2e_ms: Stats = Field(default_factory=Stats)
    connect_ms: Stats = Field(default_factory=Stats)
    client_prep_ms: Stats = Field(default_factory=Stats)
    output_tokens: Stats = Field(default_factory=Stats)
    prompt_tokens: Stats = Field(default_factory=Stats)
    cached_tokens: Stats = Field(default_factory=Stats)
    tokens_per_chunk: Stats = Field(default_factory=Stats)
    schedule_lag_ms: Stats = Field(default_factory=Stats)
    ttft_from_intended_ms: Stats = Field(default_factory=Stats)
    e2e_from_intended_ms: Stats = Field(default_factory=Stats)


class Throughput(_Model):
    window_s: float | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    steady_output_tokens_per_s: float | None = None
    steady_window_s: float | None = None


class Cold(_Model):
    seq: int
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    error_kind: str | None = None


class TokenCountSource(_Model):
    """Where the counts came from: one source name, or {source: requests} when they were mixed."""

    output_tokens: str | dict[str, int] | None = None
    prompt_tokens: str | dict[str, int] | None = None
    cached_tokens: str | dict[str, int] | None = None
    approximate: bool = False


class Goodput(_Model):
    slo: dict[str, float]
    requests: int
    fraction: float | None = None
    requests_per_s: float | None = None


class ClockPair(_Model):
    """The client's figure beside the engine's for one metric (p50s per response, or run means)."""

    client_p50: float | None = None
    server_p50: float | None = None
    client_minus_server_p50: float | None = None
    ratio_p50: float | None = None
    client_mean: float | None = None
    server_mean: float | None = None
    ratio_mean: float | None = None


class EngineClock(_Model):
    source: str
    requests: int | None = None
    ttft_ms: ClockPair = Field(default_factory=ClockPair)
    tpot_ms: ClockPair = Field(default_factory=ClockPair)


class ServerCache(_Model):
    """The engine's own prefix-cache counters over the run (deltas of two /metrics scrapes)."""

    source: str
    queries: float | None = None
    hits: float | None = None
    hit_rate: float | None = None


class Cache(_Model):
    """Prefix-cache accounting: cached ÷ prompt tokens over the requests that reported both."""

    hit_rate: float | None = None
    cached_tokens: int | None = None
    prompt_tokens: int | None = None
    requests_reporting: int = 0
    source: str | dict[str, int] | None = None
    busted: bool | None = None  # every prompt began with a unique prefix
    server: ServerCache | None = None


class PriceBasis(_Model):
    """A hosted API's price, US$ per million tokens (figures/cost.py's Price)."""

    input_per_m: float | None = None
    output_per_m: float | None = None
    source: str | None = None
    date: str | None = None


class GpuBasis(_Model):
    """GPU-hours at the measured throughput (figures/cost.py's GpuCost)."""

    usd_per_gpu_hour: float | None = None
    gpus: int | None = None


class Cost(_Model):
    basis: Literal["api", "gpu"]
    usd_per_million_output_tokens: float | None = None
    usd_per_1k_requests: float | None = None
    usd_total: float | None = None
    usd_per_hour: float | None = None
    price: PriceBasis | None = None
    gpu: GpuBasis | None = None


class TurnStats(_Model):
    turn: int
    requests: int
    ttft_ms: Stats = Field(default_factory=Stats)
    e2e_ms: Stats = Field(default_factory=Stats)
    prompt_tokens: Stats = Field(default_factory=Stats)
    cache_hit_rate: float | None = None


class ClientLoad(_Model):
    """The run's own client against this machine's calibration (`tokenrace calibrate`)."""

    client_bound: bool | None = None
    chunks_per_s: float | None = None  # content chunks of succeeded measured requests / window
    streams: int | None = None  # most requests in flight
    cpu_pct: float | None = None  # the client process's CPU over the load, % of one core
    calibrated: bool = False
    ceiling_chunks_per_s: float | None = None
    ceiling_streams: int | None = None
    calibrated_at: str | None = None
    causes: list[str] = Field(default_factory=list)


class Probes(_Model):
    """Light requests sent beside the load (one output token, a short prompt): never in the main figures."""

    rate: float | None = None
    requests: int = 0
    succeeded: int = 0
    failed: int = 0
    ttft_ms: Stats = Field(default_factory=Stats)
    e2e_ms: Stats = Field(default_factory=Stats)


class Stopped(_Model):
    """An open loop stopped before its schedule ended, and the figures that stopped it."""

    reason: Literal["over-saturated"]
    message: str
    after_s: float
    window_s: float
    send_rate: float
    end_rate: float
    in_flight_start: int
    in_flight_end: int
    ttft_ms_start: float
    ttft_ms_end: float


class ImageCountTTFT(_Model):
    """TTFT of the succeeded measured requests that carried `images` images."""

    images: int
    requests: int
    ttft_ms: Stats = Field(default_factory=Stats)


class Difference(_Model):
    """stat(with) - stat(without), with its 95 % percentile-bootstrap interval (tokenrace.stats)."""

    statistic: str = "p50"
    with_images: float | None = None
    without_images: float | None = None
    difference: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


class ImageFigures(_Model):
    """What the requests' images did (docs/metrics.md, Images): sizes, and TTFT split by image count."""

    requests_with_images: int = 0
    images: int = 0
    image_bytes: Stats = Field(default_factory=Stats)  # per request that carried images
    image_pixels: Stats = Field(default_factory=Stats)
    by_count: list[ImageCountTTFT] = Field(default_factory=list)
    ttft_difference_ms: Difference | None = None  # only when the run mixed requests with and without


class ToolFigures(_Model):
    """Tool calls in the answers, when tools were offered (docs/metrics.md, Tools)."""

    requests: int = 0  # succeeded measured requests that offered tools
    requests_with_tool_calls: int = 0
    tool_calls: int = 0
    ttft_tool_ms: Stats = Field(default_factory=Stats)


class SchemaFigures(_Model):
    """Answers validated against the response schema; the rate is None when none was checked."""

    checked: int = 0
    valid: int = 0
    valid_rate: float | None = None
    ci_low: float | None = None  # Wilson's 95 % interval
    ci_high: float | None = None


class PoolingFigures(_Model):
    """Embeddings and rerank runs: what they did per second (docs/metrics.md)."""

    api: Literal["embeddings", "rerank"]
    inputs_per_s: float | None = None  # embeddings: texts embedded by succeeded requests / window
    documents_per_s: float | None = None  # rerank: documents ranked by succeeded requests / window
    input_tokens_per_s: float | None = None  # their tokens (usage, else a tokenizer) / window
    per_request: Stats = Field(default_factory=Stats)  # inputs (documents) per request
    embedding_dim: int | None = None  # the vectors' length, when every answer had the same
    embedding_dims: list[int] | None = None  # the lengths seen, when answers differed


# Every code a run's warning may carry: a closed set, so a tool can switch on it. A new warning adds
# its code here (and says in docs/metrics.md what it means).
WarningCode = Literal[
    "resources.client_cpu",
    "resources.gpu_hot",
    "resources.gpu_idle",
    "resources.gpu_saturated",
    "resources.kv_cache_full",
    "resources.preemptions",
    "resources.sampler_failed",
    "resources.server_queue",
    "resources.system_cpu",
    "resources.system_memory",
    "resources.note",
    "cache.prefix_hits",
    "client.bound",
    "content.uneven_output",
    "efficiency.aggregate_beats_bound",
    "efficiency.decode_beats_bound",
    "efficiency.ttft_beats_bound",
    "efficiency.note",
    "energy.gpu_missing",
    "energy.server_not_on_gpu",
    "energy.shared_gpu",
    "energy.unavailable",
    "run.note",
    "stats.tail_unbounded",
    "workers.all_lost",
    "workers.died",
    "workers.lost_requests",
]


class RunWarning(BaseModel):
    """Something the reader of a run's numbers must know: what it is (`code`), the sentence shown to
    people (`message`), and the numbers behind it (`figures`), so a tool can act without parsing text.

    Codes are dotted by who raised them: `resources.*` (the monitor's advice), `cache.*`, `client.*`,
    `workers.*`, `efficiency.*` (the planner's caveats about its bound), `run.*`; `run.note` (and
    `efficiency.note`) is a warning read from a file that held only its text."""

    code: WarningCode
    message: str
    figures: dict[str, float | int | str | None] = Field(default_factory=dict)


class Efficiency(_Model):
    """Measured speed as a share of the planner's speed of light (plan.efficiency, then
    figures/efficiency.py adds the hardware's bandwidth). `error` says why there is no bound;
    `warnings` are the planner's own caveats about its bound (a measurement that beats it), coded
    `efficiency.*`; the run's `Summary.warnings` carries them too, and a sweep step keeps them here."""

    error: str | None = None
    hardware: str | None = None
    devices: int | None = None
    model: str | None = None
    precision: str | None = None
    decode_tokens_per_s_bound: float | None = None
    aggregate_tokens_per_s_bound: float | None = None
    ttft_ms_bound: float | None = None
    decode_pct_of_bound: float | None = None
    aggregate_pct_of_bound: float | None = None
    ttft_pct_of_bound: float | None = None
    decode_bound_by: str | None = None
    decode_communication_ms: float | None = None
    tdp_w_per_device: float | None = None
    decode_tokens_per_joule_at_tdp: float | None = None
    tokens_per_joule_pct_of_tdp_reference: float | None = None
    ttft_bound_memory_only: bool | None = None
    hardware_bandwidth_bytes_per_s: float | None = None
    hardware_source: str | None = None
    nearest_published: str | None = None  # the published point nearest this configuration, with its source
    nearest_published_pct_of_bound: float | None = None  # that point's speed as a % of its own bound
    warnings: list[RunWarning] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _coded_caveats(cls, data: Any) -> Any:
        """Older files kept the caveats as sentences: each reads as `efficiency.note`."""
        if not isinstance(data, dict) or not _has_text(data.get("warnings")):
            return data
        return {**data, "warnings": [_note("efficiency.note", w) for w in data["warnings"]]}


class Imported(_Model):
    """A summary computed from another tool's result file."""

    tool: str | None = None
    source_file: str | None = None
    window: Literal["duration"] | None = None  # throughput over the tool's duration: it had no start times


class Summary(_Model):
    """summary.json: every figure of one run, built by `figures.summary.summarize` alone."""

    schema_version: int = 0
    api: str | None = None  # the API the run spoke (chat, completions, responses, messages, embeddings, rerank)
    requests: RequestCounts = Field(default_factory=RequestCounts)
    error_rate: float | None = None
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    metrics: Metrics = Field(default_factory=Metrics)
    throughput: Throughput = Field(default_factory=Throughput)
    offered_rate: float | None = None
    achieved_rate: float | None = None
    max_in_flight: int | None = None
    cold: Cold | None = None
    token_count_source: TokenCountSource = Field(default_factory=TokenCountSource)
    cache: Cache | None = None
    by_turn: list[TurnStats] | None = None
    server_vs_client: EngineClock | None = None
    goodput: Goodput | None = None
    interrupted: bool = False
    max_error_rate: float | None = None
    exceeded_max_error_rate: bool = False
    efficiency: Efficiency | None = None
    cost: Cost | None = None
    resources: Resources | None = None  # what the monitor saw over the run (--monitor)
    drift: Drift | None = None  # soak runs: windows, trends, error bursts and findings
    imported: Imported | None = None  # read from another tool's result file
    # True: past this machine's calibrated ceiling, or the client's CPU at 90 % or more; None: unknown
    client_bound: bool | None = None
    client_load: ClientLoad | None = None
    probes: Probes | None = None
    stopped: Stopped | None = None
    images: ImageFigures | None = None  # None: no request carried an image
    tools: ToolFigures | None = None  # None: no tools were offered
    schema_valid_rate: float | None = None  # valid ÷ checked answers; None when none was checked
    structured_output: SchemaFigures | None = None  # None: no response schema
    pooling: PoolingFigures | None = None  # embeddings and rerank runs: inputs (documents) and tokens per second
    not_measured: dict[str, str] | None = None  # metric -> why it has no value in this run
    speculative: Speculative | None = None  # the engine's speculative-decoding counters over the run
    content: ContentSpeed | None = None  # decode speed per kind of content (--content)
    energy: Energy | None = None  # GPU energy over the run (NVML on this machine, or --dcgm-url)
    reference: ReferenceFigures | None = None  # --profile: the figures its public reference defines
    warnings: list[RunWarning] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _typed_warnings(cls, data: Any) -> Any:
        """Files before schema version 2 kept warnings as sentences in two lists: `resource_warnings`
        (the monitor's advice, shown first) and `warnings`. Each becomes a RunWarning, in that order."""
        if not isinstance(data, dict) or "resource_warnings" not in data and not _has_text(data.get("warnings")):
            return data
        data = dict(data)
        old = [("resources.note", w) for w in data.pop("resource_warnings", None) or []]
        old += [("run.note", w) for w in data.get("warnings") or [] if isinstance(w, str)]
        typed = [w for w in data.get("warnings") or [] if not isinstance(w, str)]
        data["warnings"] = [{"code": code, "message": text} for code, text in old] + typed
        return data

    @model_validator(mode="after")
    def _efficiency_caveats(self) -> Summary:
        """Every warning sits in `warnings`: a file that kept the efficiency caveats only in its
        `efficiency` section (before they were coded) gets them here, once."""
        caveats = self.efficiency.warnings if self.efficiency is not None else []
        self.warnings += [w for w in caveats if w not in self.warnings]
        return self


def _has_text(warnings: Any) -> bool:
    return isinstance(warnings, list) and any(isinstance(w, str) for w in warnings)


def _note(code: WarningCode, warning: Any) -> Any:
    """A sentence from an older file as a coded warning; a warning already coded stays as it is."""
    return {"code": code, "message": warning} if isinstance(warning, str) else warning
