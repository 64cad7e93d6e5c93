"""summary.json's `reference`: a run's figures as a public reference defines them (`--profile`).

Each reference keeps its own names and units (docs/metrics.md, "Reference profiles"): Artificial
Analysis and LLMPerf report seconds, MLPerf Endpoints milliseconds. None when undefined, never 0.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenrace.model.base import _Model
from tokenrace.model.stats import Spread

Reference = Literal["aa", "llmperf", "endpoints"]


class AaFigures(_Model):
    """Artificial Analysis: per request, then P5 / P25 / P50 / P75 / P95 over the run's requests."""

    output_speed_tok_s: Spread = Field(default_factory=Spread)  # tokens after the first ÷ time after the first
    ttft_s: Spread = Field(default_factory=Spread)
    e2e_100_tokens_s: Spread = Field(default_factory=Spread)  # TTFT + 100 ÷ output speed


class LlmperfFigures(_Model):
    """LLMPerf's `metrics_summary` (token_benchmark_ray.py): per-request figures of the succeeded
    requests, with its quantiles, and its whole-run output throughput."""

    ttft_s: Spread = Field(default_factory=Spread)
    inter_token_latency_s: Spread = Field(default_factory=Spread)  # time to the last content chunk ÷ output tokens
    end_to_end_latency_s: Spread = Field(default_factory=Spread)
    request_output_throughput_token_per_s: Spread = Field(default_factory=Spread)  # output tokens ÷ e2e
    number_input_tokens: Spread = Field(default_factory=Spread)
    number_output_tokens: Spread = Field(default_factory=Spread)
    overall_output_throughput: float | None = None  # tokens/s: output tokens of succeeded ÷ the run's span
    num_completed_requests: int = 0
    completed_requests_per_min: float | None = None
    error_rate: float | None = None


class EndpointsFigures(_Model):
    """MLPerf Endpoints' three figures of one fixed-concurrency point."""

    system_tps: float | None = None  # output tokens ÷ (first send -> last completion), tokens/s
    tps_per_user: float | None = None  # 1000 ÷ TPOT p90, tokens/s
    ttft_p90_ms: float | None = None
    tpot_p90_ms: float | None = None  # (completion − first chunk) ÷ tokens after the first chunk
    concurrency: int | None = None  # the point's fixed concurrency (None: open loop)
    offline: bool = False  # every request of the point was in flight at once


class ReferenceFigures(_Model):
    """The figures the run's `--profile` names, as its reference defines them."""

    profile: str
    reference: Reference
    source: str  # where the reference defines them
    aa: AaFigures | None = None
    llmperf: LlmperfFigures | None = None
    endpoints: EndpointsFigures | None = None
