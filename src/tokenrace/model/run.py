"""sweep.json and profile.json: a ramp's or a profile's steps, one row per step run."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenrace.model.base import _Model
from tokenrace.model.claim import ConditionCheck
from tokenrace.model.engine import ProfileEngine
from tokenrace.model.reference import EndpointsFigures
from tokenrace.model.sections import ContentSpeed
from tokenrace.model.sla import SlaSection, SweepPlanSection
from tokenrace.model.stats import Stats
from tokenrace.model.summary import Cold, Cost, Efficiency, EngineClock, RequestCounts


class Quantiles(_Model):
    """A step's p50, p95 and max of one latency (its summary's Stats, cut to what a table shows)."""

    p50: float | None = None
    p95: float | None = None
    max: float | None = None


class Knee(_Model):
    """The step past which more load bought too little throughput (sweep/knee.py says how)."""

    index: int | None = None
    step: str
    value: float | None = None
    reason: str | None = None
    concurrency: int | None = None
    rate: float | None = None
    throughput_tokens_per_s: float | None = None
    e2e_p95_ms: float | None = None
    usd_per_million_output_tokens: float | None = None


class Warm(_Model):
    """The profile's first step at concurrency 1, warm: its TTFT and E2E statistics."""

    ttft_ms: Stats | None = None
    e2e_ms: Stats | None = None


class StepRow(_Model):
    """One step of a sweep or profile: its key numbers and where its run directory is."""

    step: str
    api: str | None = None  # the API the step spoke
    value: float | None = None
    concurrency: int | None = None
    rate: float | None = None
    requests: RequestCounts = Field(default_factory=RequestCounts)
    ttft_ms: Quantiles = Field(default_factory=Quantiles)
    tpot_ms: Quantiles = Field(default_factory=Quantiles)
    itl_chunk_ms: Quantiles = Field(default_factory=Quantiles)
    e2e_ms: Quantiles = Field(default_factory=Quantiles)
    prompt_tokens_mean: float | None = None
    cache_hit_rate: float | None = None
    output_tokens_per_s: float | None = None
    steady_output_tokens_per_s: float | None = None
    throughput_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    input_tokens_per_s: float | None = None  # embeddings and rerank: pooling.input_tokens_per_s
    achieved_rate: float | None = None
    error_rate: float | None = None
    goodput_fraction: float | None = None
    goodput_requests_per_s: float | None = None
    server_vs_client: EngineClock | None = None
    efficiency: Efficiency | None = None
    cost: Cost | None = None
    content: str | None = None  # the kind of content the step asked for (--content)
    acceptance_rate: float | None = None  # the engine's speculative decoding over the step
    output_tokens_per_joule: float | None = None  # GPU energy over the step (NVML or --dcgm-url)
    endpoints: EndpointsFigures | None = None  # --profile endpoints: the step's MLPerf Endpoints figures
    run_dir: str | None = None
    gain: float | None = None
    saturated: bool | None = None
    failing: bool | None = None
    knee: bool | None = None
    passed: bool | None = None  # SLA and goodput searches: every objective held (this value's runs pooled)
    certain: bool | None = None  # ... and every objective's interval was clear of its limit
    checks: list[ConditionCheck] | None = None  # ... each objective: value, ci_low, ci_high, held, clear


class PrefillFit(_Model):
    """A prompt-length sweep's fit: ttft_ms = intercept_ms + slope_ms_per_token x prompt tokens."""

    points: int | None = None
    slope_ms_per_token: float | None = None
    intercept_ms: float | None = None
    r2: float | None = None
    prefill_tokens_per_s: float | None = None
    x: str | None = None  # what was fitted against what
    y: str | None = None


class GoodputSearch(_Model):
    """A goodput sweep's search for the highest rate that met the SLO (the SLA search, sweep/sla.py)."""

    best_rate: float | None = None
    lower: float | None = None
    upper: float | None = None
    reason: str | None = None
    probes: int | None = None
    attainment: float | None = None
    slo: dict[str, float] | None = None
    best_step: str | None = None
    goodput_requests_per_s: float | None = None


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
    plan: SweepPlanSection | None = None
    rule: dict[str, str] | None = None
    stop_reason: str | None = None
    knee: Knee | None = None
    steps: list[StepRow] = Field(default_factory=list)
    prefill: PrefillFit | None = None  # prompt-length sweeps: TTFT against prompt tokens, fitted
    goodput_search: GoodputSearch | None = None  # goodput sweeps: the highest rate that met the SLO
    sla: SlaSection | None = None  # SLA and goodput searches: objectives, boundary, steps
    content: ContentSpeed | None = None  # content sweeps: TPOT per kind of content, compared


class ProfileFile(_Model):
    """profile.json: the embedded engine's cold request, warm requests and concurrency steps."""

    schema_version: int = 0
    kind: Literal["embedded-profile"] = "embedded-profile"
    engine: ProfileEngine | None = None
    model: str | None = None
    endpoint: str | None = None
    cold: Cold | None = None
    warm: Warm | None = None
    steps: list[StepRow] = Field(default_factory=list)
    cache_bust: bool | None = None  # the built-in prompts were busted (a unique prefix per request)
