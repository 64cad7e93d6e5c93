"""`tokenrace sweep`: a series of runs (one run directory per step) and the knee."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from tokenrace import aio
from tokenrace.cli.common import Options, echo_json, picked, wide_console
from tokenrace.cli.options import BenchOptions, bench_options, cost_options, embedded_serves, settings_from_options
from tokenrace.cli.profiles import apply_profile, profile_option, run_defaults, sweep_defaults
from tokenrace.errors import UsageError
from tokenrace.figures.cost import CostSpec
from tokenrace.figures.objectives import parse_objectives
from tokenrace.load.progress import LiveProgress
from tokenrace.load.runner import Load
from tokenrace.model.run import SweepFile
from tokenrace.report.tables import sweep_view
from tokenrace.runs.run import Run
from tokenrace.runs.session import read_inputs
from tokenrace.runs.settings import BenchSettings
from tokenrace.serve.embedded import EmbeddedOptions
from tokenrace.serve.launch import start_embedded
from tokenrace.sweep.knee import DEFAULT_MAX_ERROR_RATE
from tokenrace.sweep.profile import embedded_settings
from tokenrace.sweep.runner import DEFAULT_CONCURRENCIES, SweepPlan, run_sweep
from tokenrace.sweep.sla import SearchKind
from tokenrace.units import parse_values

EMBEDDED_CONCURRENCIES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
MAX_EMBEDDED_SLOTS = 32
EMBEDDED_SLA_SLOTS = 8
CTX_PER_SLOT = 512  # tokens of context each parallel slot gets (llama-server splits -c between slots)


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """The sweep's own options, as click parsed them (the run's are read by settings_from_options)."""

    concurrencies: str | None = None
    rates: str | None = None
    input_lengths: str | None = None
    max_goodput: bool = False
    sla: str | None = None
    content: str | None = None
    gain_threshold: float = 0.10
    patience: int = 1
    no_stop: bool = False
    attainment: float = 0.95
    start_rate: float = 1.0
    tolerance: float = 0.10
    max_probes: int = 12
    search: SearchKind = "concurrency"  # a click.Choice
    repeats: int = 2
    max_value: float | None = None
    offline: bool = False

    @classmethod
    def of(cls, o: Options) -> SweepOptions:
        return picked(cls, o)


def _cost_options_unless_shared(fn: Any) -> Any:
    """--price/--gpu-hour-cost/--gpus, unless the shared bench options already carry them (once they
    are wired into `bench`): click must not see the same option twice."""
    probe = bench_options(click.command()(lambda **o: None))
    return fn if any(p.name == "price" for p in probe.params) else cost_options(fn)


@click.command("sweep")
@bench_options
@profile_option
@click.option("--concurrencies", help="Concurrency steps [default: 1,2,4,...,256, stopping at saturation].")
@click.option("--rates", help="Open-loop request rates, one step each, e.g. 1,2,4,8.")
@click.option("--input-lengths", help="Prompt-length sweep: synthetic prompt sizes in tokens, e.g. 128,512,2048.")
@click.option(
    "--sla",
    help="Search for the highest load at which every objective holds, e.g. 'ttft_p99<=500ms,tpot_p50<=50ms'.",
)
@click.option(
    "--search",
    type=click.Choice(["concurrency", "rate"]),
    default="concurrency",
    show_default=True,
    help="--sla: what the search varies.",
)
@click.option(
    "--repeats",
    type=int,
    default=2,
    show_default=True,
    help="--sla, --max-goodput: extra runs at each boundary value until every objective is clear of its limit.",
)
@click.option("--max-value", type=float, help="--sla: the highest concurrency or rate tried [default: 256 / 1024].")
@click.option(
    "--offline",
    is_flag=True,
    help="After a concurrency sweep, one more step with every request of the step in flight at once "
    "(MLPerf's offline point).",
)
@click.option("--max-goodput", is_flag=True, help="Search for the highest request rate that meets --slo.")
@click.option(
    "--gain-threshold",
    type=float,
    default=0.10,
    show_default=True,
    help="Saturated below this throughput gain per step.",
)
@click.option("--patience", type=int, default=1, show_default=True, help="Consecutive saturated steps before stopping.")
@click.option("--no-stop", is_flag=True, help="Run every step, even after saturation or errors.")
@click.option(
    "--attainment",
    type=float,
    default=0.95,
    show_default=True,
    help="--max-goodput: share of requests within every SLO.",
)
@click.option(
    "--start-rate", type=float, default=1.0, show_default=True, help="--max-goodput: first rate probed (req/s)."
)
@click.option(
    "--tolerance",
    type=float,
    default=0.10,
    show_default=True,
    help="--max-goodput: stop when the bracket is this narrow.",
)
@click.option("--max-probes", type=int, default=12, show_default=True, help="--max-goodput: most probes.")
@_cost_options_unless_shared
@click.pass_context
def command(ctx: click.Context, /, **o: Any) -> None:
    """Run a series of benchmarks, one run directory per step, and find where throughput stops growing.

    Default: a concurrency sweep 1, 2, 4, 8, ... that stops once throughput grows by less than
    --gain-threshold while p95 latency keeps rising (or on errors above --max-error-rate, default 5 %)
    and marks the knee. Writes sweep.json beside the step directories. Without --url it sweeps the
    embedded model at 1, 2, 4, ... 32.
    """
    chosen = apply_profile(ctx, o, lambda p: {**run_defaults(p), **sweep_defaults(p)})
    opts = BenchOptions.of(o)
    settings = settings_from_options(opts)
    settings.profile = chosen.name if chosen else None

    def explicit(name: str) -> bool:
        return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE

    plan = plan_from_options(SweepOptions.of(o), settings, explicit("requests") or explicit("duration"))
    cost = opts.cost.spec()
    quiet = opts.as_json
    if settings.endpoint is None:
        model = opts.model if opts.model and opts.model.endswith(".gguf") else None
        result = _embedded(settings, plan, model, quiet, explicit, cost)
    else:
        result = aio.run(run_sweep(settings, plan, _progress_for(quiet), sys.argv, cost))
    _report(result, opts.as_json)


def plan_from_options(o: SweepOptions, settings: BenchSettings, explicit_count: bool) -> SweepPlan:
    kinds = {
        "concurrency": o.concurrencies,
        "rate": o.rates,
        "input_tokens": o.input_lengths,
        "goodput": "yes" if o.max_goodput else None,
        "sla": o.sla,
    }
    chosen = [k for k, v in kinds.items() if v]
    if len(chosen) > 1:
        raise UsageError("choose one sweep: --concurrencies, --rates, --input-lengths, --sla or --max-goodput")
    # --content all alone: the three kinds, one step each, compared (with another sweep, each step mixes them).
    kind = chosen[0] if chosen else "content" if o.content == "all" else "concurrency"
    flag = {"concurrency": "--concurrencies", "rate": "--rates", "input_tokens": "--input-lengths"}.get(kind)
    values = parse_values(kinds[kind], flag) if flag and kinds[kind] else None
    return SweepPlan(
        kind=kind,
        values=values or (DEFAULT_CONCURRENCIES if kind == "concurrency" else ()),
        gain_threshold=o.gain_threshold,
        patience=o.patience,
        max_error_rate=settings.max_error_rate if settings.max_error_rate is not None else DEFAULT_MAX_ERROR_RATE,
        stop_early=not o.no_stop,
        requests_per_worker=None if explicit_count else 4,
        min_requests=0 if explicit_count else None,  # a count given is what each step sends
        attainment=o.attainment,
        start_rate=o.start_rate,
        tolerance=o.tolerance,
        max_probes=o.max_probes,
        objectives=parse_objectives(o.sla, "sla") if o.sla else (),
        search=o.search,
        repeats=o.repeats,
        max_value=o.max_value,
        confidence=settings.confidence,
        offline=o.offline,
    )


def _progress_for(quiet: bool) -> Any:
    def make(name: str, load: Load) -> LiveProgress:
        return LiveProgress(load.requests, enabled=not quiet)

    return make


def _embedded(
    settings: BenchSettings,
    plan: SweepPlan,
    model: str | None,
    quiet: bool,
    explicit: Callable[[str], bool],
    cost: CostSpec | None,
) -> Run:
    embeddings = embedded_serves(settings.request.api)
    if plan.kind == "concurrency" and not explicit("concurrencies"):
        plan.values = EMBEDDED_CONCURRENCIES
    if not explicit("max_tokens"):
        settings.request.max_tokens = 64  # small steps on a small CPU
    if not (explicit("requests") or explicit("duration")):
        settings.load.requests = 8
    settings.model = None
    # One slot per request in flight: past its slots llama-server queues (and, busy, may reset connections).
    slots = int(min(max(plan.values or (4.0,)), MAX_EMBEDDED_SLOTS))
    if plan.kind == "sla" and plan.search == "concurrency":
        plan.max_value = plan.max_value or float(2 * EMBEDDED_SLA_SLOTS)  # past the slots, to see the queue
        slots = EMBEDDED_SLA_SLOTS
    plan.validate(settings)  # bad input is reported before the engine takes its seconds to start
    read_inputs(settings)
    click.echo(f"starting the embedded model (llama-server, {slots} parallel slots)...", err=True)

    async def go() -> Run:
        opts = EmbeddedOptions(
            model=Path(model) if model else None,
            parallel=slots,
            ctx_size=max(8192, CTX_PER_SLOT * slots),
            embeddings=embeddings,
        )
        engine = await start_embedded(opts)
        try:
            return await run_sweep(embedded_settings(engine, settings), plan, _progress_for(quiet), sys.argv, cost)
        finally:
            engine.stop()

    return aio.run(go())


def _report(result: Run, as_json: bool) -> None:
    s = result.sweep
    assert isinstance(s, SweepFile)
    if as_json:
        echo_json(s.model_dump(mode="json"))
    else:
        wide_console().print(sweep_view(s))
        click.echo(f"sweep directory: {result.directory}")
    if result.any_interrupted:
        click.echo("interrupted: the steps measured so far are saved", err=True)
        sys.exit(130)
    if s.stop_reason == "errors" and not s.knee and len(result.steps) <= 1:
        click.echo("the first step failed: see its errors with `tokenrace show`", err=True)
        sys.exit(1)
