"""The one place a run's summary is built: records + the run's context -> `Summary`.

Every section comes from a function in `figures/` (or the monitor's advice); nothing edits a summary
after this returns. The order matters only where one figure reads another: cost and efficiency read
the throughput and token means; the engine's clock from /metrics reads the client's means; resource
warnings read the whole run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenrace.figures.cache import cache_section, cache_warning
from tokenrace.figures.client_load import ClientObservation, client_load, client_warning
from tokenrace.figures.content import content_section, content_warning, samples_of
from tokenrace.figures.cost import CostSpec, cost_of
from tokenrace.figures.drift import drift, is_soak
from tokenrace.figures.efficiency import EfficiencySpec, efficiency_of
from tokenrace.figures.energy import energy_section
from tokenrace.figures.engine_clock import from_metrics_delta, server_vs_client
from tokenrace.figures.images import image_figures
from tokenrace.figures.pooling import not_measured, pooling_figures
from tokenrace.figures.reference import reference_section
from tokenrace.figures.slo import Slo
from tokenrace.figures.speculative import speculative_section
from tokenrace.figures.structured import schema_figures, tool_figures
from tokenrace.figures.summary import by_turn, probes_section, stopped_section, summarize
from tokenrace.figures.tails import tail_warning
from tokenrace.load.windows import Windows
from tokenrace.model.files import SCHEMA_VERSION
from tokenrace.model.monitor import Resources, TimeseriesLine
from tokenrace.model.records import RequestRecord
from tokenrace.model.sections import Speculative
from tokenrace.model.summary import EngineClock, Metrics, RunWarning, ServerCache, Summary
from tokenrace.monitor.advice import resource_warnings
from tokenrace.monitor.energy import EnergyWindow
from tokenrace.stats import CONFIDENCE


@dataclass(frozen=True, slots=True)
class EngineScrapes:
    """Two /metrics texts of the serving engine, taken before and after the load."""

    engine: str
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class RunContext:
    """What the summary needs beyond the records: how the load ran and what else was observed."""

    windows: Windows
    slo: Slo | None = None
    max_error_rate: float | None = None  # None: the run failed only when every request failed
    confidence: float = CONFIDENCE  # which tail percentiles the requests can bound (figures/tails.py)
    interrupted: bool = False
    concurrency: int = 1  # what efficiency is planned at (open loop: the most in flight)
    efficiency: EfficiencySpec | None = None
    cost: CostSpec | None = None
    provider: str | None = None
    model: str | None = None
    resources: Resources | None = None  # the monitor's summary, when it ran
    timeseries: Sequence[TimeseriesLine] | None = None  # the monitor's samples, for soak drift
    t0_ns: int | None = None
    duration_s: float | None = None
    scrapes: EngineScrapes | None = None
    cache_busted: bool | None = None
    server_cache: ServerCache | None = None  # the engine's prefix-cache counters over the run
    warnings: tuple[RunWarning, ...] = ()  # what the run itself observed (a worker that died, ...)
    client: ClientObservation | None = None  # this run's own client (None: imported from elsewhere)
    probe_rate: float | None = None  # probes/s sent beside the load, when asked
    response_schema: bool = False  # every answer was to be validated against a JSON Schema
    energy: EnergyWindow | None = None  # the GPUs' energy over the load (NVML or a DCGM exporter)
    api: str = "chat"  # the API the run spoke
    stream: bool = True  # the answers were streamed
    profile: str | None = None  # --profile: add the figures of its reference (figures/reference.py)


def build_summary(records: Sequence[RequestRecord], ctx: RunContext) -> Summary:
    s = summarize(records, ctx.windows, ctx.slo)
    ok = [r for r in records if r.phase == "measure" and r.ok]
    s.schema_version = SCHEMA_VERSION
    s.api = ctx.api
    s.pooling = pooling_figures(ctx.api, ok, s.throughput.window_s)
    s.not_measured = not_measured(ctx.api, ctx.stream) or None
    s.interrupted = ctx.interrupted
    s.max_error_rate = ctx.max_error_rate
    rate, limit = s.error_rate, ctx.max_error_rate
    s.exceeded_max_error_rate = rate is not None and (rate > limit if limit is not None else rate >= 1.0)
    s.server_vs_client = _engine_clock(ok, ctx.scrapes, s.metrics)
    s.cache = cache_section(ok, ctx.cache_busted, ctx.server_cache)
    s.probes = probes_section(records, ctx.probe_rate)
    s.stopped = stopped_section(ctx.windows)
    scrapes = ctx.scrapes
    s.speculative = speculative_section(scrapes.engine, scrapes.before, scrapes.after) if scrapes else None
    s.content = content_section(samples_of(ok), _acceptance_by_kind(ok, s.speculative))
    s.by_turn = by_turn(ok) or None
    s.energy = energy_section(ctx.energy, records)
    if ctx.efficiency is not None and s.requests.succeeded:
        per_joule = s.energy.output_tokens_per_joule if s.energy is not None else None
        s.efficiency = efficiency_of(s, ctx.efficiency, ctx.concurrency, per_joule)
    s.cost = cost_of(s, ctx.provider, ctx.model, ctx.cost)
    resource = []
    if ctx.resources is not None:
        s.resources = ctx.resources
        resource = resource_warnings(ctx.resources, s)
    if is_soak(ctx.duration_s):
        s.drift = drift(records, ctx.timeseries)
    if ctx.client is not None:
        s.client_load = client_load(ok, s.throughput.window_s, s.max_in_flight or 0, ctx.client)
        s.client_bound = s.client_load.client_bound
    s.images = image_figures(ok)
    closed = ctx.windows.offered_rate is None
    s.reference = reference_section(ctx.profile, records, ctx.concurrency if closed else None)
    s.tools = tool_figures(ok)
    s.structured_output = schema_figures(ok, ctx.response_schema)
    s.schema_valid_rate = s.structured_output.valid_rate if s.structured_output is not None else None
    found = (
        cache_warning(s.cache),
        client_warning(s.client_load),
        content_warning(s.content),
        tail_warning(s.metrics, ctx.confidence),
    )
    energy = ctx.energy.warnings if ctx.energy is not None else []
    caveats = s.efficiency.warnings if s.efficiency is not None else []  # the planner's, about its bound
    s.warnings = [*resource, *(w for w in found if w is not None), *caveats, *ctx.warnings, *energy]
    return s


def _acceptance_by_kind(ok: Sequence[RequestRecord], spec: Speculative | None) -> dict[str, float | None] | None:
    """The engine's acceptance belongs to a kind of content only when the run asked for that kind alone."""
    kinds = {r.content for r in ok}
    if spec is None or len(kinds) != 1 or None in kinds:
        return None
    return {str(kinds.pop()): spec.acceptance_rate}


def _engine_clock(ok: Sequence[RequestRecord], scrapes: EngineScrapes | None, metrics: Metrics) -> EngineClock | None:
    """The engine's clock beside the client's: per response (llama.cpp timings), else /metrics means."""
    per_response = server_vs_client(ok)
    if per_response is not None or scrapes is None:
        return per_response
    try:
        return from_metrics_delta(
            scrapes.engine, scrapes.before, scrapes.after, metrics.ttft_ms.mean, metrics.tpot_ms.mean
        )
    except ValueError:  # a scrape that parsed once and not twice: leave the comparison out
        return None
