"""The main job: start the embedded model, then a cold request, warm requests at concurrency 1
and a small concurrency ramp, each step a full run directory, and one report for all of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.load.runner import Load
from tokenrace.model.engine import EngineRecord, ProfileEngine
from tokenrace.model.files import PROFILE, SCHEMA_VERSION
from tokenrace.model.manifest import Manifest
from tokenrace.model.run import ProfileFile, Warm
from tokenrace.runs.rows import step_row
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSettings
from tokenrace.runs.store import default_run_dir, write_model
from tokenrace.serve.embedded import EmbeddedOptions
from tokenrace.serve.launch import RunningEngine, start_engine
from tokenrace.serve.vllm_cpu import VllmCpuOptions
from tokenrace.sweep.runner import ProgressFor, StepRunner

__all__ = ["DEFAULT_STEPS", "profile_summary", "run_profile", "step_row"]

# (step name, load): 1 cold + 10 warm at concurrency 1, then 2 and 4 in flight.
DEFAULT_STEPS: tuple[tuple[str, Load], ...] = (
    ("c1", Load(concurrency=1, requests=10, cold=True)),
    ("c2", Load(concurrency=2, requests=8, cold=False)),
    ("c4", Load(concurrency=4, requests=12, cold=False)),
)


# Something to do with the engine once the steps are done, before it stops (bench's quality pass):
# given the engine and the profile directory.
After = Callable[[RunningEngine, Path], Awaitable[Any]]


async def run_profile(
    template: BenchSettings,
    engine_opts: EmbeddedOptions | VllmCpuOptions,
    progress_for: ProgressFor | None = None,
    steps: tuple[tuple[str, Load], ...] = DEFAULT_STEPS,
    after: After | None = None,
) -> tuple[Run, Any]:
    """The profile's run, and what `after` returned (None when it did not run)."""
    engine = await start_engine(engine_opts)
    try:
        result = await _run_steps(engine, template, steps, progress_for)
        done = None
        if after is not None and not result.any_interrupted:
            done = await after(engine, result.directory)
        return result, done
    finally:
        engine.stop()


def embedded_settings(engine: RunningEngine, template: BenchSettings) -> BenchSettings:
    """The template pointed at a running embedded engine, with the engine in every manifest."""
    endpoint = ResolvedEndpoint(engine.base_url, None, None, engine.provider)
    return dataclasses.replace(template, endpoint=endpoint, model=engine.model, engine=engine.info)


async def _run_steps(
    engine: RunningEngine,
    template: BenchSettings,
    steps: tuple[tuple[str, Load], ...],
    progress_for: ProgressFor | None,
) -> Run:
    parent = template.output or default_run_dir(template.label or f"embedded-{engine.model}")
    parent.mkdir(parents=True, exist_ok=True)
    runner = StepRunner(embedded_settings(engine, template), parent, progress_for)
    results: list[tuple[str, Run]] = []
    for name, load in steps:
        result = await runner.run(
            name, dataclasses.replace(load, seed=template.load.seed, keep_awake=template.load.keep_awake)
        )
        results.append((name, result))
        if result.interrupted:
            break
    file = profile_summary(results, engine.info)
    write_model(parent / PROFILE, file)
    manifest = results[0][1].manifest if results else Manifest()
    return Run(parent, "profile", file, manifest, results)


def profile_summary(results: list[tuple[str, Run]], engine: EngineRecord) -> ProfileFile:
    first = results[0][1].summary if results else None
    manifest = results[0][1].manifest if results else Manifest()
    return ProfileFile(
        schema_version=SCHEMA_VERSION,
        model=manifest.model,
        endpoint=manifest.endpoint,
        engine=ProfileEngine.of(engine),
        cold=first.cold if first else None,
        warm=Warm(ttft_ms=first.metrics.ttft_ms, e2e_ms=first.metrics.e2e_ms) if first else Warm(),
        steps=[step_row(n, r.directory, r.summary, r.manifest) for n, r in results],
        cache_bust=manifest.workload.cache_bust if results and manifest.workload else None,
    )
