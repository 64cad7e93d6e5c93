"""A run's key numbers as one row of a sweep or profile table."""

from __future__ import annotations

from pathlib import Path

from tokenrace.figures.cost import CostSpec, cost_of
from tokenrace.model.manifest import Manifest
from tokenrace.model.run import Quantiles, StepRow
from tokenrace.model.settings import LoadSettings
from tokenrace.model.stats import Stats
from tokenrace.model.summary import Summary


def _pick(m: Stats) -> Quantiles:
    return Quantiles(p50=m.p50, p95=m.p95, max=m.max)


def sweep_throughput(summary: Summary) -> float | None:
    """The throughput a sweep compares between steps: steady output tokens/s, else over the window;
    embeddings and rerank, which generate nothing, compare their input tokens/s."""
    tp = summary.throughput
    value = tp.steady_output_tokens_per_s
    if value is None:
        value = tp.output_tokens_per_s
    if summary.pooling is not None:
        value = summary.pooling.input_tokens_per_s
    return None if value is None else float(value)


def step_row(name: str, directory: Path, s: Summary, manifest: Manifest, cost: CostSpec | None = None) -> StepRow:
    """A step's key numbers (shared by sweeps, the embedded profile and saved profiles read back)."""
    load = manifest.settings.load or LoadSettings()
    m = s.metrics
    return StepRow(
        step=name,
        api=s.api,
        concurrency=load.concurrency,
        rate=load.rate,
        requests=s.requests,
        ttft_ms=_pick(m.ttft_ms),
        tpot_ms=_pick(m.tpot_ms),
        itl_chunk_ms=_pick(m.itl_chunk_ms),
        e2e_ms=_pick(m.e2e_ms),
        prompt_tokens_mean=m.prompt_tokens.mean,
        cache_hit_rate=s.cache.hit_rate if s.cache else None,
        output_tokens_per_s=s.throughput.output_tokens_per_s,
        steady_output_tokens_per_s=s.throughput.steady_output_tokens_per_s,
        throughput_tokens_per_s=sweep_throughput(s),
        requests_per_s=s.throughput.requests_per_s,
        input_tokens_per_s=s.pooling.input_tokens_per_s if s.pooling else None,
        achieved_rate=s.achieved_rate,
        error_rate=s.error_rate,
        goodput_fraction=s.goodput.fraction if s.goodput else None,
        goodput_requests_per_s=s.goodput.requests_per_s if s.goodput else None,
        server_vs_client=s.server_vs_client,
        efficiency=s.efficiency,
        cost=cost_of(s, manifest.provider, manifest.model, cost),
        content=manifest.settings.prompts.content if manifest.settings.prompts else None,
        acceptance_rate=s.speculative.acceptance_rate if s.speculative else None,
        output_tokens_per_joule=s.energy.output_tokens_per_joule if s.energy else None,
        endpoints=s.reference.endpoints if s.reference else None,
        run_dir=str(directory),
    )
