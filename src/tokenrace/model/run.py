"""sweep.json and profile.json: a ramp's or a profile's steps, one row per step run."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenrace.model.base import JsonObject, _Model
from tokenrace.model.summary import Cold, Cost, EngineClock, RequestCounts


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
