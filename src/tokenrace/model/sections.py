"""Summary sections of what a speed claim rests on: speculative decoding as the engine counts it,
decode speed per kind of content, and energy per token. Typed here, filled by `figures/`.

Every figure is defined in docs/metrics.md; a figure that was not measured is None, never 0.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenrace.model.base import _Model as _Section


class Speculative(_Section):
    """Speculative decoding over the measured window, from the engine's own /metrics."""

    source: str  # the engine and the series read
    over: Literal["window", "end"] = "window"  # counter deltas over the load, or gauges read at its end
    drafts: float | None = None  # verification steps that carried a draft
    draft_tokens: float | None = None  # draft tokens proposed
    accepted_tokens: float | None = None  # draft tokens accepted
    acceptance_rate: float | None = None  # accepted ÷ draft tokens
    mean_accepted_per_draft: float | None = None  # accepted ÷ drafts
    tokens_per_step: float | None = None  # 1 + accepted ÷ drafts: tokens each verification step emits
    per_position: list[float] | None = None  # accepted at draft position i ÷ drafts, i = 0, 1, ...


class GpuEnergy(_Section):
    """One GPU's energy over the measured window."""

    gpu: str  # NVML index, or the exporter's `gpu` label
    name: str | None = None
    joules: float | None = None
    mean_power_w: float | None = None
    method: Literal["counter", "power_samples"] | None = None  # the energy counter, or sampled power integrated
    samples: int | None = None  # power samples integrated (method power_samples)
    reason: str | None = None  # why joules is None
    pids: list[int] | None = None  # processes on this GPU at the start or the end (NVML); None: not known


class Energy(_Section):
    """Energy the GPUs drew over the measured window, and per output token."""

    source: str  # nvml, or the DCGM exporter's URL
    method: Literal["counter", "power_samples", "mixed"] | None = None
    window_s: float | None = None  # between the two readings
    joules: float | None = None  # all GPUs; None when any GPU's figure is missing
    output_tokens: int | None = None  # generated in the window (every request the load sent)
    joules_per_output_token: float | None = None
    output_tokens_per_joule: float | None = None
    mean_power_w: float | None = None  # joules ÷ window_s
    gpus: list[GpuEnergy] = Field(default_factory=list)
    reason: str | None = None  # why joules is None


class ContentKind(_Section):
    """Decode speed for one kind of content."""

    requests: int = 0  # succeeded measured requests with a TPOT
    tpot_ms_p50: float | None = None
    tpot_ms_mean: float | None = None
    output_tokens_mean: float | None = None
    prompt_tokens_mean: float | None = None  # about equal across kinds, by construction
    acceptance_rate: float | None = None  # the engine's, when the kind ran alone with /metrics


class ContentSpeed(_Section):
    """Whether decode speed depends on what is generated: TPOT p50 per kind, slowest ÷ fastest."""

    kinds: dict[str, ContentKind] = Field(default_factory=dict)
    slowest: str | None = None
    fastest: str | None = None
    ratio: float | None = None  # TPOT p50 of the slowest kind ÷ that of the fastest
    ci_low: float | None = None  # 95 % bootstrap interval of the ratio
    ci_high: float | None = None
    depends: bool | None = None  # the interval lies above x1.05; None: fewer than two kinds, or no interval
    verdict: str | None = None
