"""`tokenrace bench`: measure one OpenAI-compatible endpoint."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import BaseModel

from tokenrace import aio
from tokenrace.cli import bench_quality
from tokenrace.cli.common import echo_json, stdout_console
from tokenrace.cli.options import BenchOptions, bench_options, embedded_serves, settings_from_options
from tokenrace.cli.profiles import apply_profile, profile_option, run_defaults
from tokenrace.client.request import GENERATING_APIS
from tokenrace.errors import UsageError
from tokenrace.figures.client_load import HOW_TO_CALIBRATE
from tokenrace.figures.efficiency import EfficiencySpec
from tokenrace.load.progress import LiveProgress
from tokenrace.model.metrics import ERROR_RATE
from tokenrace.model.run import ProfileFile
from tokenrace.report.headline import named, said
from tokenrace.report.tables import profile_view, summary_view
from tokenrace.runs.history import index_quietly
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession, read_inputs
from tokenrace.runs.settings import BenchSettings
from tokenrace.serve.embedded import EmbeddedOptions, default_model
from tokenrace.serve.vllm_cpu import VllmCpuOptions
from tokenrace.sweep.profile import DEFAULT_STEPS, run_profile

if TYPE_CHECKING:
    from tokenrace.quality.models import QualityResult
    from tokenrace.serve.launch import RunningEngine


@click.command("bench")
@bench_options
@click.option(
    "--engine",
    type=click.Choice(["embedded", "vllm"]),
    default="embedded",
    show_default=True,
    help="With no --url: the engine started for the run, llama.cpp (embedded) or vLLM's CPU build "
    "(vllm, from .venv-vllm: scripts/setup.sh --engines), both serving the embedded model "
    "(--api embeddings: llama-server --embeddings, vLLM's pooling runner).",
)
@profile_option
@bench_quality.OPTION
@click.pass_context
def command(ctx: click.Context, /, **o: Any) -> None:
    """Benchmark an OpenAI-compatible endpoint and write records.jsonl, summary.json, manifest.json.

    With no --url (and no OPENAI_BASE_URL), start the embedded model (in llama.cpp, or with
    --engine vllm in vLLM's CPU build) and run the default profile: one cold request, 10 warm
    requests at concurrency 1, then concurrency 2 and 4.
    With --quality-samples N, a quality pass follows on the same endpoint (RUN/quality/).
    """
    chosen = apply_profile(ctx, o, run_defaults)
    opts = BenchOptions.of(o)
    settings = settings_from_options(opts)
    settings.profile = chosen.name if chosen else None
    samples = opts.quality_samples
    bench_quality.check_samples(samples, settings.request.api)
    if settings.endpoint is not None and opts.engine != "embedded":
        raise UsageError(f"--engine {opts.engine} starts an engine for the run: leave out --url (and OPENAI_BASE_URL)")
    if settings.endpoint is None:
        explicit = any(ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE for k in LOAD_FLAGS)
        explicit = explicit or chosen is not None  # a profile's load is one run
        _embedded(ctx, settings, opts, single_run=explicit)
        return
    progress = LiveProgress(settings.load.requests, enabled=not opts.as_json)
    with progress:
        result = aio.run(BenchSession(settings, progress, sys.argv).run())
    index_quietly(result.directory)
    quality = None
    if samples and not result.interrupted:
        base_url, model = settings.endpoint.base_url, str(result.manifest.model)
        quality = bench_quality.run_pass(settings, base_url, model, samples, result.directory, opts.as_json)
    report(result, opts.as_json, quality)


LOAD_FLAGS = ("concurrency", "rate", "requests", "duration")


def _embedded(ctx: click.Context, settings: BenchSettings, o: BenchOptions, single_run: bool) -> None:
    model = o.model if o.model and o.model.endswith(".gguf") else None
    settings.model = None
    embeddings = embedded_serves(settings.request.api)
    if ctx.get_parameter_source("max_tokens") != click.core.ParameterSource.COMMANDLINE and not settings.profile:
        settings.request.max_tokens = 64  # keeps the default profile well under a minute on 2 cores
    if ctx.get_parameter_source("keep_awake") != click.core.ParameterSource.COMMANDLINE:
        # The engine shares this machine's cores with the client: CPU the ticker would take is
        # CPU the model loses, which costs more than the ~0.3 ms of wake-up it saves.
        settings.load.keep_awake = False
    vllm = o.engine == "vllm"
    if settings.efficiency is None and settings.request.api in GENERATING_APIS and not vllm:
        # (vLLM serves the model dequantized, in float32: the GGUF's size is not what it reads per token.)
        # The embedded model's file and this CPU are known: every step shows % of the bound.
        settings.efficiency = EfficiencySpec("cpu", model or str(default_model()))
    steps = (("run", settings.load),) if single_run else DEFAULT_STEPS
    read_inputs(settings)  # bad input is reported before the engine takes its seconds to start
    serving = " serving embeddings" if embeddings else ""
    engine_name = "vLLM's CPU build, float32" if vllm else "llama.cpp llama-server"
    click.echo(f"starting the embedded model ({engine_name}, SmolLM2-135M-Instruct Q4_1{serving})...", err=True)

    def progress_for(name: str, load: object) -> LiveProgress:
        return LiveProgress(getattr(load, "requests", None), enabled=not o.as_json)

    samples = o.quality_samples
    after = None
    if isinstance(samples, int):
        # Inside the profile, so that the pass asks the engine that was measured before it stops.
        async def after(engine: RunningEngine, directory: Path) -> QualityResult:
            return await bench_quality.quality_pass(
                settings,
                engine.base_url,
                engine.model,
                samples,
                directory,
                o.as_json,
                engine.info,
            )

    result, quality = aio.run(
        run_profile(
            settings,
            VllmCpuOptions(model=Path(model) if model else None, embeddings=embeddings)
            if vllm
            else EmbeddedOptions(model=Path(model) if model else None, embeddings=embeddings),
            progress_for,
            steps,
            after,
        )
    )
    if o.as_json:
        _echo_with_quality(result.sweep, quality)
    else:
        assert isinstance(result.data, ProfileFile)
        stdout_console().print(profile_view(result.data))
        click.echo(f"run directory: {result.directory}")
        if quality is not None:
            bench_quality.print_pass(quality, result.directory)
    if result.any_interrupted:
        sys.exit(130)


def _echo_with_quality(model: BaseModel, quality: QualityResult | None) -> None:
    """Print the summary (a profile's: its sweep) as JSON, with the quality pass's quality.json
    under `quality` when there was one."""
    printed = model.model_dump(mode="json")
    if quality is not None:
        printed["quality"] = quality.model_dump(mode="json")
    echo_json(printed)


def report(result: Run, as_json: bool, quality: QualityResult | None = None) -> None:
    if as_json:
        _echo_with_quality(result.summary, quality)
    else:
        stdout_console().print(
            summary_view(result.summary, title=f"{result.manifest.model} @ {result.manifest.endpoint}")
        )
        click.echo(f"run directory: {result.directory}")
        if quality is not None:
            bench_quality.print_pass(quality, result.directory)
    workers = result.manifest.workers
    if workers is not None and workers.reason:
        click.echo(f"--workers {workers.requested}: {workers.count} ({workers.reason})", err=True)
    client = result.summary.client_load
    if client is not None and not client.calibrated:
        click.echo(HOW_TO_CALIBRATE, err=True)
    if result.interrupted:
        click.echo("interrupted: what was measured is saved", err=True)
        sys.exit(130)
    if result.failed_threshold:
        # Without --max-error-rate, a run fails only when every request failed.
        s = result.summary
        why = (
            "every request failed"
            if s.max_error_rate is None
            else f"above the limit of {said(ERROR_RATE, s.max_error_rate)}"
        )
        click.echo(f"{named(ERROR_RATE, s.error_rate)}: {why}", err=True)
        sys.exit(1)
