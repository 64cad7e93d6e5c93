"""`tokenrace sweep`: a series of runs (one run directory per step) and the knee."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from tokenrace import aio
from tokenrace.cli.common import echo_json
from tokenrace.cli.options import bench_options, cost_options, embedded_serves, settings_from_options, spec_from_options
from tokenrace.errors import UsageError
from tokenrace.figures.cost import CostSpec
from tokenrace.load.progress import LiveProgress
from tokenrace.load.runner import Load
from tokenrace.model.run import StepRow, SweepFile
from tokenrace.report.tables import fmt
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSettings, read_inputs
from tokenrace.serve.embedded import EmbeddedOptions
from tokenrace.serve.launch import start_embedded
from tokenrace.sweep.knee import DEFAULT_MAX_ERROR_RATE
from tokenrace.sweep.profile import embedded_settings
from tokenrace.sweep.runner import DEFAULT_CONCURRENCIES, SweepPlan, run_sweep

EMBEDDED_CONCURRENCIES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
MAX_EMBEDDED_SLOTS = 32
CTX_PER_SLOT = 512  # tokens of context each parallel slot gets (llama-server splits -c between slots)


def _cost_options_unless_shared(fn: Any) -> Any:
    """--price/--gpu-hour-cost/--gpus, unless the shared bench options already carry them (once they
    are wired into `bench`): click must not see the same option twice."""
    probe = bench_options(click.command()(lambda **o: None))
    return fn if any(p.name == "price" for p in probe.params) else cost_options(fn)


@click.command("sweep")
@bench_options
@click.option("--concurrencies", help="Concurrency steps [default: 1,2,4,...,256, stopping at saturation].")
@click.option("--rates", help="Open-loop request rates, one step each, e.g. 1,2,4,8.")
@click.option("--input-lengths", help="Prompt-length sweep: synthetic prompt sizes in tokens, e.g. 128,512,2048.")
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
    settings = settings_from_options(o)

    def explicit(name: str) -> bool:
        return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE

    plan = plan_from_options(o, settings, explicit("requests") or explicit("duration"))
    cost = spec_from_options(o)
    if settings.endpoint is None:
        result = _embedded(settings, plan, o, explicit, cost)
    else:
        result = aio.run(run_sweep(settings, plan, _progress_for(o), sys.argv, cost))
    _report(result, bool(o["as_json"]))


def plan_from_options(o: dict[str, Any], settings: BenchSettings, explicit_count: bool) -> SweepPlan:
    kinds = {
        "concurrency": o["concurrencies"],
        "rate": o["rates"],
        "input_tokens": o["input_lengths"],
        "goodput": o["max_goodput"] or None,
    }
    chosen = [k for k, v in kinds.items() if v]
    if len(chosen) > 1:
        raise UsageError("choose one sweep: --concurrencies, --rates, --input-lengths or --max-goodput")
    # --content all alone: the three kinds, one step each, compared (with another sweep, each step mixes them).
    kind = chosen[0] if chosen else "content" if o.get("content") == "all" else "concurrency"
    flag = {"concurrency": "--concurrencies", "rate": "--rates", "input_tokens": "--input-lengths"}.get(kind)
    values = parse_values(kinds[kind], flag) if flag and kinds[kind] else None
    return SweepPlan(
        kind=kind,
        values=values or (DEFAULT_CONCURRENCIES if kind == "concurrency" else ()),
        gain_threshold=o["gain_threshold"],
        patience=o["patience"],
        max_error_rate=settings.max_error_rate if settings.max_error_rate is not None else DEFAULT_MAX_ERROR_RATE,
        stop_early=not o["no_stop"],
        requests_per_worker=None if explicit_count else 4,
        attainment=o["attainment"],
        start_rate=o["start_rate"],
        tolerance=o["tolerance"],
        max_probes=o["max_probes"],
    )


def parse_values(text: str | None, flag: str) -> tuple[float, ...] | None:
    """'1,2,4,8' -> (1.0, 2.0, 4.0, 8.0)."""
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 or not math.isfinite(v) for v in values):
        raise UsageError(f"{flag}: expected positive numbers, got {text!r}")
    return values


def _progress_for(o: dict[str, Any]) -> Any:
    def make(name: str, load: Load) -> LiveProgress:
        return LiveProgress(load.requests, enabled=not o["as_json"])

    return make


def _embedded(
    settings: BenchSettings, plan: SweepPlan, o: dict[str, Any], explicit: Callable[[str], bool], cost: CostSpec | None
) -> Run:
    embeddings = embedded_serves(settings.request.api)
    if plan.kind == "concurrency" and not explicit("concurrencies"):
        plan.values = EMBEDDED_CONCURRENCIES
    if not explicit("max_tokens"):
        settings.request.max_tokens = 64  # small steps on a small CPU
    if not (explicit("requests") or explicit("duration")):
        settings.load.requests = 8
    model = str(o["model"]) if o["model"] and str(o["model"]).endswith(".gguf") else None
    settings.model = None
    # One slot per request in flight: past its slots llama-server queues (and, busy, may reset connections).
    slots = int(min(max(plan.values or (4.0,)), MAX_EMBEDDED_SLOTS))
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
            return await run_sweep(embedded_settings(engine, settings), plan, _progress_for(o), sys.argv, cost)
        finally:
            engine.stop()

    return aio.run(go())


def _report(result: Run, as_json: bool) -> None:
    s = result.sweep
    assert isinstance(s, SweepFile)
    if as_json:
        echo_json(s.model_dump(mode="json"))
    else:
        print_sweep(s)
        click.echo(f"sweep directory: {result.directory}")
    if result.any_interrupted:
        click.echo("interrupted: the steps measured so far are saved", err=True)
        sys.exit(130)
    if s.stop_reason == "errors" and not s.knee and len(result.steps) <= 1:
        click.echo("the first step failed: see its errors with `tokenrace show`", err=True)
        sys.exit(1)


# --- terminal rendering (also used by `tokenrace show`) ---------------------------------------------


def sweep_table(s: SweepFile) -> Table:
    kind = s.sweep or "concurrency"
    t = Table(
        title=f"{kind} sweep: {fmt(s.model)} @ {fmt(s.endpoint)}",
        title_justify="left",
        header_style="bold",
    )
    first = {
        "concurrency": "conc.",
        "rate": "rate",
        "goodput": "rate",
        "input_tokens": "prompt tok",
        "content": "conc.",
    }
    priced = any(_usd(row) is not None for row in s.steps)
    spec = any(row.acceptance_rate is not None for row in s.steps)
    joules = any(row.output_tokens_per_joule is not None for row in s.steps)
    cols = ("step", first[kind], "ok", "TTFT p50", "p95", "TPOT p50", "p95", *(("accept",) if spec else ()))
    cols += ("E2E p95", "tok/s", "gain", "err %", "cached", *(("tok/J",) if joules else ()))
    for c in (*cols, *(("$/M out tok",) if priced else ()), ""):
        t.add_column(c, justify="left" if c in ("step", "") else "right")
    for row in s.steps:
        req = row.requests
        t.add_row(
            row.step,
            _load_cell(kind, row),
            f"{req.succeeded}/{req.total}",
            fmt(row.ttft_ms.p50),
            fmt(row.ttft_ms.p95),
            fmt(row.tpot_ms.p50, 2),
            fmt(row.tpot_ms.p95, 2),
            *((_percent(row.acceptance_rate),) if spec else ()),
            fmt(row.e2e_ms.p95),
            fmt(row.throughput_tokens_per_s),
            _gain(row.gain),
            fmt(None if row.error_rate is None else row.error_rate * 100),
            _percent(row.cache_hit_rate),
            *((fmt(row.output_tokens_per_joule, 2),) if joules else ()),
            *((fmt(_usd(row), 4),) if priced else ()),
            _mark(row),
        )
    return t


def _usd(row: StepRow) -> float | None:
    return row.cost.usd_per_million_output_tokens if row.cost else None


def _percent(share: float | None) -> str:
    return "—" if share is None else f"{share * 100:.0f} %"


def _load_cell(kind: str, row: StepRow) -> str:
    if kind in ("concurrency", "content"):
        return str(row.concurrency)
    if kind == "input_tokens":
        return fmt(row.prompt_tokens_mean, 0)
    return fmt(row.rate, 2)


def _gain(g: float | None) -> str:
    return "—" if g is None else f"{g * 100:+.1f} %"


def _mark(row: StepRow) -> str:
    if row.knee:
        return "[bold green]◀ knee[/]"
    if row.failing:
        return "[red]errors[/]"
    if row.saturated:
        return "[yellow]saturated[/]"
    if row.passed is not None:
        return "[green]meets SLO[/]" if row.passed else "[red]misses SLO[/]"
    return ""


def sweep_lines(s: SweepFile) -> list[str]:
    lines = []
    knee = s.knee
    if knee:
        what = f"concurrency {knee.concurrency}" if s.sweep == "concurrency" else f"rate {fmt(knee.rate, 2)} req/s"
        usd = knee.usd_per_million_output_tokens
        lines.append(
            f"knee: {knee.step} ({what}): {fmt(knee.throughput_tokens_per_s)} output tok/s, "
            f"E2E p95 {fmt(knee.e2e_p95_ms)} ms ({knee.reason})"
            + (f", ${fmt(usd, 4)} per million output tokens" if usd is not None else "")
        )
    elif s.sweep in ("concurrency", "rate") and s.steps:
        lines.append(
            "knee: not reached (throughput still grew at the last step)"
            if s.stop_reason == "completed"
            else f"knee: none ({s.stop_reason} at the first step)"
        )
    lines.append(f"stopped: {fmt(s.stop_reason or 'no reason recorded (an older sweep.json)')}")
    if s.content is not None:
        lines.append(f"content: {s.content.verdict}")
    if s.prefill:
        p = s.prefill
        lines.append(
            f"prefill fit: TTFT = {fmt(p.intercept_ms)} ms + {fmt(p.slope_ms_per_token, 4)} ms/token; "
            f"{fmt(p.prefill_tokens_per_s)} tok/s prefill, R² {fmt(p.r2, 3)} ({p.points} points)"
        )
    g = s.goodput_search
    if g:
        lines.append(
            f"max goodput rate: {fmt(g.best_rate, 3)} req/s meeting {g.slo} for "
            f"≥{fmt((g.attainment or 0) * 100, 0)} % of requests; bracket [{fmt(g.lower, 3)}, "
            f"{fmt(g.upper, 3)}], {g.probes} probes ({g.reason})"
        )
    return lines


def wide_console() -> Console:
    """A terminal's own width; 160 columns when printing to a file or pipe (rich would use 80)."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def print_sweep(s: SweepFile, console: Console | None = None) -> None:
    console = console or wide_console()
    console.print(sweep_table(s))
    for line in sweep_lines(s):
        console.print(line, highlight=False)
