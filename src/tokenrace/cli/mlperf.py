"""`tokenrace mlperf`: an MLPerf Inference run under MLCommons' LoadGen against any OpenAI-compatible endpoint."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

import click
from pydantic import JsonValue

from tokenrace import aio
from tokenrace.cli.common import Options, echo_json, parse_duration_s, stdout_console
from tokenrace.cli.options import options_named, settings_from_some
from tokenrace.load.mlperf import (
    BOUND_MODELS,
    BOUNDS,
    SCENARIOS,
    MlperfSpec,
    Scenario,
    default_min_queries,
    resolve_bounds,
)
from tokenrace.load.progress import LiveProgress
from tokenrace.report.mlperf import agreement_table, describe_spec, log_lines, verdict_lines
from tokenrace.report.tables import summary_view
from tokenrace.runs.history import index_quietly
from tokenrace.runs.mlperf import MlperfResult, MlperfSession
from tokenrace.runs.session import BenchSettings, Progress
from tokenrace.serve.embedded import EmbeddedOptions
from tokenrace.serve.launch import start_embedded
from tokenrace.sweep.profile import embedded_settings
from tokenrace.table import to_rich

SHARED = (
    "url",
    "api_key",
    "provider",
    "model",
    "api",
    "include_usage",
    "max_tokens",
    "temperature",
    "seed",
    "ignore_eos",
    "extra_body",
    "headers",
    "max_concurrency",
    "prompt",
    "prompts_file",
    "input_tokens",
    "output_tokens",
    "tokenizer",
    "keep_awake",
    "monitor",
    "metrics_url",
    "timeout_connect",
    "timeout_first_byte",
    "timeout_idle",
    "timeout_total",
    "output",
    "label",
    "as_json",
)
EMBEDDED_MAX_TOKENS = 64  # as bench's embedded profile: a 2-core machine answers 2 queries/s at this length


def _bounds_help() -> str:
    rows = "; ".join(
        f"{b.model} {b.scenario} {b.ttft_ms:g}/{b.tpot_ms:g}"
        + (f" (mlperf.conf: TPOT {b.conf_tpot_ms:g})" if b.conf_tpot_ms is not None else "")
        for b in BOUNDS
    )
    return f"MLPerf's TTFT/TPOT p99 bounds (ms) of a model: {rows}."


@click.command("mlperf")
@click.option("--scenario", type=click.Choice(SCENARIOS), default="server", show_default=True)
@click.option("--bounds", "bounds_model", type=click.Choice(BOUND_MODELS), help=_bounds_help())
@click.option("--ttft", type=float, help="TTFT bound at p99, ms (overrides --bounds).")
@click.option("--tpot", type=float, help="TPOT bound at p99, ms (overrides --bounds).")
@click.option(
    "--target-qps", type=float, help="Server, interactive: LoadGen's Poisson rate (queries/s); offline: expected rate."
)
@click.option(
    "--find-peak",
    is_flag=True,
    help="LoadGen's FindPeakPerformance: the highest valid rate from --target-qps (default 1).",
)
@click.option(
    "--duration",
    help="Shorten the minimum duration (MLPerf's is 600 s; a shorter run is not comparable with published results).",
)
@click.option("--quick", is_flag=True, help="--duration 60s.")
@options_named(*SHARED)
@click.pass_context
def command(ctx: click.Context, /, **o: Any) -> None:
    """Run MLPerf Inference's LoadGen against an endpoint: LoadGen schedules and judges, tokenrace sends.

    Writes a normal run directory (records.jsonl, summary.json, manifest.json) with LoadGen's
    mlperf_log_summary.txt and mlperf_log_detail.txt beside them, and prints LoadGen's verdict beside
    tokenrace's socket-stamped TTFT and TPOT for the same requests. With no --url, starts the embedded
    llama.cpp model as bench does (--max-tokens 64 unless given). --max-concurrency caps the requests
    in flight (offline: 64 unless given). docs/mlperf.md has the bounds' sources.
    """
    spec = spec_from_options(o)
    settings = settings_from_some(o)
    if settings.endpoint is None:
        if ctx.get_parameter_source("max_tokens") != click.core.ParameterSource.COMMANDLINE:
            settings.request.max_tokens = EMBEDDED_MAX_TOKENS
        click.echo("starting the embedded model (llama.cpp llama-server, SmolLM2-135M-Instruct Q4_1)...", err=True)
    with LiveProgress(None, enabled=not o["as_json"]) as progress:
        result = aio.run(
            _embedded(settings, spec, progress) if settings.endpoint is None else _session(settings, spec, progress)
        )
    index_quietly(result.run.directory)
    report(result, bool(o["as_json"]))


def spec_from_options(o: Options) -> MlperfSpec:
    scenario: Scenario = o["scenario"]
    ttft, tpot, _row = resolve_bounds(o["bounds_model"], scenario, o["ttft"], o["tpot"])
    duration = 60.0 if o["quick"] else parse_duration_s(o["duration"])
    if o["quick"] and o["duration"]:
        raise click.UsageError("--quick is --duration 60s; give one of them")
    spec = MlperfSpec(
        scenario=scenario,
        ttft_ms=ttft,
        tpot_ms=tpot,
        target_qps=o["target_qps"],
        find_peak=bool(o["find_peak"]),
        min_queries=default_min_queries(scenario, o["bounds_model"], shortened=duration is not None),
        max_concurrency=o["max_concurrency"] or (64 if scenario == "offline" else None),
        bounds_model=o["bounds_model"],
    )
    if duration is not None:
        spec = replace(spec, min_duration_s=duration)
    spec.validate()
    return spec


async def _session(settings: BenchSettings, spec: MlperfSpec, progress: Progress) -> MlperfResult:
    return await MlperfSession(settings, spec, progress, sys.argv).run_mlperf()


async def _embedded(settings: BenchSettings, spec: MlperfSpec, progress: Progress) -> MlperfResult:
    settings.load.keep_awake = False  # the engine shares these cores: a spinning client would slow it
    engine = await start_embedded(EmbeddedOptions())
    try:
        return await _session(embedded_settings(engine, settings), spec, progress)
    finally:
        engine.stop()


def report(result: MlperfResult, as_json: bool) -> None:
    if as_json:
        echo_json(_as_json(result))
    else:
        console = stdout_console()
        click.echo(f"MLPerf {describe_spec(result.spec)}")
        for line in verdict_lines(result):
            console.print(line, highlight=False, markup=False)
        if result.agreement:
            console.print(to_rich(agreement_table(result)))
            for note in agreement_table(result).notes:
                console.print(note, highlight=False, markup=False)
        console.print(
            summary_view(
                result.run.summary,
                title=f"tokenrace: {result.run.manifest.model} @ {result.run.manifest.endpoint}",
            )
        )
        for line in log_lines(result):
            click.echo(line)
        click.echo(f"run directory: {result.run.directory}")
    if result.run.interrupted:
        click.echo("interrupted: what was measured is saved; LoadGen's logs are incomplete", err=True)
        # LoadGen's schedule runs on in its thread and cannot be stopped from outside; a normal exit
        # would destroy its objects under it (C++ terminate). The run's files are closed already.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)


def _as_json(result: MlperfResult) -> JsonValue:
    lg = result.loadgen
    return {
        "scenario": result.spec.scenario,
        "comparable": result.spec.comparable,
        "min_duration_s": result.spec.min_duration_s,
        "ttft_bound_ms": result.spec.ttft_ms,
        "tpot_bound_ms": result.spec.tpot_ms,
        "target_qps": result.spec.target_qps,
        "loadgen": None
        if lg is None
        else {
            "validity": lg.validity,
            "early_stopping": list(lg.early_stopping),
            "completed_tokens_per_second": lg.completed_tokens_per_s,
            "tokens_per_second": lg.tokens_per_s,
            "peak_qps": lg.peak_qps,
        },
        "agreement": [
            {
                "figure": a.figure,
                "loadgen_ms": a.loadgen_ms,
                "tokenrace_ms": a.tokenrace_ms,
                "difference_ms": a.difference_ms,
                "tokenrace_from_handover_ms": a.from_handover_ms,
            }
            for a in result.agreement
        ],
        "notes": list[JsonValue](verdict_lines(result)),
        "run_directory": str(result.run.directory),
        "summary": result.run.summary.model_dump(mode="json"),
    }
