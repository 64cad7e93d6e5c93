"""The files of a saved run, as typed models: records.jsonl lines, summary.json, manifest.json,
sweep.json (and profile.json), and the history index row.

Every file carries `schema_version`. Files written before it existed are read as version 0: the
model fills what they lack with None, never with 0. The JSON Schemas in docs/schema/ are generated
from these models (`python -m tokenrace.runs.schema`), and a test fails when they are stale.

Nested objects whose layout belongs to another module (the monitor's resources, soak drift, the
planner's efficiency, the machine's environment) are kept as JSON objects here and typed where they
are made; what other tools read first (latency statistics, throughput, counts, sources, cost, cache)
is typed in full.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tokenrace.client.redact import HIDDEN, redact_fields, redact_headers

SCHEMA_VERSION = 1

JsonObject = dict[str, Any]


class _Model(BaseModel):
    # Unknown keys are kept (a newer tokenrace may add fields; an older reader must not lose them).
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Stats(_Model):
    """One metric's distribution over the measured requests (see docs/metrics.md); None when undefined."""

    count: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


# --- records.jsonl ---------------------------------------------------------------------------------


class RecordLine(_Model):
    """One request, as written to records.jsonl when it ends. Offsets in ms from the run's t0."""

    schema_version: int = 0
    seq: int
    phase: Literal["cold", "warmup", "measure", "probe"] = "measure"
    worker: int | None = None
    session_id: str | None = None
    turn: int | None = None
    intended_start_ms: float | None = None
    start_ms: float | None = None
    schedule_lag_ms: float | None = None
    client_prep_ms: float | None = None
    connect_ms: float | None = None
    new_connection: bool | None = None
    retried_stale_connection: bool = False
    ttft_ms: float | None = None
    ttfa_ms: float | None = None
    e2e_ms: float | None = None
    tpot_ms: float | None = None
    ttft_from_intended_ms: float | None = None
    e2e_from_intended_ms: float | None = None
    chunk_offsets_ms: list[float] = Field(default_factory=list)
    chunk_tokens: list[int] | None = None
    reasoning_chunks: int = 0
    prompt_tokens: int | None = None
    prompt_tokens_source: str | None = None
    output_tokens: int | None = None
    output_tokens_source: str | None = None
    cached_tokens: int | None = None
    cached_tokens_source: Literal["usage", "engine"] | None = None
    output_chars: int | None = None
    max_tokens: int | None = None
    finish_reason: str | None = None
    status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    retry_after_s: float | None = None
    response_id: str | None = None
    server_timing: JsonObject | None = None


# --- summary.json ----------------------------------------------------------------------------------


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


class Cost(_Model):
    basis: Literal["api", "gpu"]
    usd_per_million_output_tokens: float | None = None
    usd_per_1k_requests: float | None = None
    usd_total: float | None = None
    usd_per_hour: float | None = None
    price: JsonObject | None = None
    gpu: JsonObject | None = None


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


class Summary(_Model):
    """summary.json: every figure of one run, built by `figures.summary.summarize` alone."""

    schema_version: int = 0
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
    efficiency: JsonObject | None = None
    cost: Cost | None = None
    resources: JsonObject | None = None
    resource_warnings: list[str] | None = None
    drift: JsonObject | None = None
    imported: JsonObject | None = None  # read from another tool's result file
    # True: past this machine's calibrated ceiling, or the client's CPU at 90 % or more; None: unknown
    client_bound: bool | None = None
    client_load: ClientLoad | None = None
    probes: Probes | None = None
    stopped: Stopped | None = None
    warnings: list[str] = Field(default_factory=list)


# --- manifest.json ---------------------------------------------------------------------------------


class PromptsInfo(_Model):
    name: str | None = None
    count: int | None = None
    sizing: str | None = None
    cache_bust: bool | None = None


class Workload(_Model):
    """What was sent: independent prompts, sessions or a trace, and whether prompts were busted."""

    kind: Literal["prompts", "sessions", "trace"]
    source: str | None = None
    cache_bust: bool | None = None
    nonce: str | None = None  # the run's bust tags are made from it; unique per run
    notes: list[str] = Field(default_factory=list)


class WorkerInfo(_Model):
    """One sending worker: where it ran, its clock against the parent's, what it sent, how it ended."""

    index: int
    pid: int | None = None
    host: str | None = None
    node: str | None = None  # the Ray node id, on a Ray cluster
    clock_offset_ns: int | None = None  # the worker's perf_counter_ns() minus the parent's (min-RTT probe)
    clock_rtt_ns: int | None = None  # the round trip of that probe
    clock_error_ns: int | None = None  # the estimate is within ± this (half the round trip)
    clock_shared: bool | None = None  # the worker reads the parent's own clock (same kernel)
    clock_applied_ns: int | None = None  # subtracted from its stamps: 0 when the clock is shared
    requests: int | None = None  # requests handed to it
    died: str | None = None  # why it died mid-run, when it did


class WorkersInfo(_Model):
    """How the load's sends were spread: over worker processes, Ray actors, or this one process."""

    kind: Literal["process", "processes", "ray"]
    count: int
    requested: str  # what --workers said: a number or "auto"
    reason: str | None = None  # why `auto` chose `count`
    lead_ms: float | None = None  # open loop: sends are handed out this long before their time
    start_method: str | None = None  # processes: multiprocessing's start method
    ray_address: str | None = None
    lost_requests: int = 0  # in flight on a worker that died (records with error kind worker_lost)
    workers: list[WorkerInfo] = Field(default_factory=list)


class Manifest(_Model):
    """manifest.json: what was run, against what, and how it was measured. Secrets never appear."""

    schema_version: int = 0
    tool: str = "tokenrace"
    version: str | None = None
    command: list[str] | None = None
    settings: JsonObject = Field(default_factory=dict)
    endpoint: str | None = None
    provider: str | None = None
    model: str | None = None
    models_answer: Any = None
    server_headers: dict[str, str] | None = None
    prompts: PromptsInfo = Field(default_factory=PromptsInfo)
    tokenizer: str | None = None
    arrival_clock: Literal["socket", "reader"] | None = None
    engine: JsonObject | None = None
    started_at: str | None = None
    t0_perf_counter_ns: int | None = None
    finished_at: str | None = None
    interrupted: bool | None = None
    environment: JsonObject | None = None
    server: JsonObject | None = None
    monitor: JsonObject | None = None
    imported: JsonObject | None = None
    workload: Workload | None = None
    workers: WorkersInfo | None = None

    # Whoever builds a manifest, the values of secret-looking headers and body fields never reach
    # the file (the run also scrubs every value it knows is secret: see BenchSettings.secrets).
    @field_validator("settings")
    @classmethod
    def _hide_request_secrets(cls, settings: JsonObject) -> JsonObject:
        request = settings.get("request")
        if not isinstance(request, dict):
            return settings
        hidden = dict(request)
        if isinstance(request.get("extra_headers"), dict):
            hidden["extra_headers"] = redact_headers(request["extra_headers"])
        if request.get("extra_body") is not None:
            hidden["extra_body"] = redact_fields(request["extra_body"])
        return {**settings, "request": hidden}

    @field_validator("server_headers")
    @classmethod
    def _hide_server_secrets(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        # Response headers speak of tokens openly (x-ratelimit-remaining-tokens): only cookies hide.
        if headers is None:
            return None
        return {k: HIDDEN if k.lower() in ("set-cookie", "cookie") else v for k, v in headers.items()}


# --- sweep.json / profile.json ---------------------------------------------------------------------


class StepRow(_Model):
    """One step of a sweep or profile: its key numbers and where its run directory is."""

    step: str
    value: float | None = None
    concurrency: int | None = None
    rate: float | None = None
    requests: RequestCounts = Field(default_factory=RequestCounts)
    ttft_ms: JsonObject = Field(default_factory=dict)
    tpot_ms: JsonObject = Field(default_factory=dict)
    itl_chunk_ms: JsonObject = Field(default_factory=dict)
    e2e_ms: JsonObject = Field(default_factory=dict)
    prompt_tokens_mean: float | None = None
    cache_hit_rate: float | None = None
    output_tokens_per_s: float | None = None
    steady_output_tokens_per_s: float | None = None
    throughput_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    achieved_rate: float | None = None
    error_rate: float | None = None
    goodput_fraction: float | None = None
    goodput_requests_per_s: float | None = None
    server_vs_client: EngineClock | None = None
    efficiency: JsonObject | None = None
    cost: Cost | None = None
    run_dir: str | None = None
    gain: float | None = None
    saturated: bool | None = None
    failing: bool | None = None
    knee: bool | None = None
    passed: bool | None = None  # SLA and goodput searches: every objective held (this value's runs pooled)
    certain: bool | None = None  # ... and every objective's interval was clear of its limit
    checks: list[JsonObject] | None = None  # ... each objective: value, ci_low, ci_high, held, clear


class SweepFile(_Model):
    """sweep.json: the steps of a ramp (concurrency, rate, prompt length or a goodput search)."""

    schema_version: int = 0
    kind: Literal["sweep"] = "sweep"
    sweep: str | None = None
    tool: str = "tokenrace"
    version: str | None = None
    command: list[str] | None = None
    endpoint: str | None = None
    provider: str | None = None
    model: str | None = None
    label: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    plan: JsonObject | None = None
    rule: dict[str, str] | None = None
    stop_reason: str | None = None
    knee: JsonObject | None = None
    steps: list[StepRow] = Field(default_factory=list)
    prefill: JsonObject | None = None  # prompt-length sweeps: TTFT against prompt tokens, fitted
    goodput_search: JsonObject | None = None  # goodput sweeps: the highest rate that met the SLO
    sla: JsonObject | None = None  # SLA and goodput searches: objectives, boundary, steps


class ProfileFile(_Model):
    """profile.json: the embedded engine's cold request, warm requests and concurrency steps."""

    schema_version: int = 0
    kind: Literal["embedded-profile"] = "embedded-profile"
    engine: JsonObject | None = None
    model: str | None = None
    endpoint: str | None = None
    cold: Cold | None = None
    warm: JsonObject | None = None
    steps: list[StepRow] = Field(default_factory=list)
    cache_bust: bool | None = None  # the built-in prompts were busted (a unique prefix per request)


# --- the history index -----------------------------------------------------------------------------


class HistoryRow(_Model):
    """One row of the SQLite run index (`tokenrace runs`); the columns are these fields, in order."""

    model_config = ConfigDict(extra="forbid")

    id: str
    path: str
    kind: Literal["run", "sweep", "profile"]
    parent_id: str | None = None
    name: str | None = None
    label: str | None = None
    endpoint: str | None = None
    provider: str | None = None
    model: str | None = None
    source: str | None = None
    version: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    concurrency: float | None = None
    rate: float | None = None
    requests: int | None = None
    error_rate: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    output_tokens_per_s: float | None = None
    cache_hit_rate: float | None = None
    steps: int | None = None
    knee: str | None = None
    indexed_at: str


FILE_MODELS: dict[str, type[BaseModel]] = {
    "records.jsonl": RecordLine,
    "summary.json": Summary,
    "manifest.json": Manifest,
    "sweep.json": SweepFile,
    "profile.json": ProfileFile,
    "history-row": HistoryRow,
}
