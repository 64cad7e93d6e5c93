"""The main job: start the embedded model, then a cold request, warm requests at concurrency 1
and a small concurrency ramp, each step a full run directory, and one report for all of them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenrace.bench.runner import Load
from tokenrace.bench.session import BenchResult, BenchSession, BenchSettings, Progress
from tokenrace.bench.store import default_run_dir, write_json
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.serve.embedded import EmbeddedOptions
from tokenrace.serve.launch import RunningEngine, start_embedded

# (step name, load): 1 cold + 10 warm at concurrency 1, then 2 and 4 in flight.
DEFAULT_STEPS: tuple[tuple[str, Load], ...] = (
    ("c1", Load(concurrency=1, requests=10, cold=True)),
    ("c2", Load(concurrency=2, requests=8, cold=False)),
    ("c4", Load(concurrency=4, requests=12, cold=False)),
)


@dataclass(slots=True)
class ProfileResult:
    directory: Path
    steps: list[tuple[str, BenchResult]]
    engine: dict[str, Any]
    summary: dict[str, Any]


def step_row(name: str, r: BenchResult) -> dict[str, Any]:
    s = r.summary
    m = s["metrics"]
    pick = lambda k: {q: m[k][q] for q in ("p50", "p95", "max")}  # noqa: E731
    return {
        "step": name,
        "concurrency": r.manifest["settings"]["load"]["concurrency"],
        "requests": s["requests"],
        "ttft_ms": pick("ttft_ms"),
        "tpot_ms": pick("tpot_ms"),
        "e2e_ms": pick("e2e_ms"),
        "output_tokens_per_s": s["throughput"]["output_tokens_per_s"],
        "requests_per_s": s["throughput"]["requests_per_s"],
        "error_rate": s["error_rate"],
        "server_vs_client": s.get("server_vs_client"),
        "efficiency": s.get("efficiency"),
        "run_dir": str(r.directory),
    }


async def run_profile(
    template: BenchSettings,
    engine_opts: EmbeddedOptions,
    progress_for: Any = None,
    steps: tuple[tuple[str, Load], ...] = DEFAULT_STEPS,
) -> ProfileResult:
    engine = await start_embedded(engine_opts)
    try:
        return await _run_steps(engine, template, steps, progress_for)
    finally:
        engine.stop()


async def _run_steps(engine: RunningEngine, template: BenchSettings, steps: tuple[tuple[str, Load], ...], progress_for: Any) -> ProfileResult:
    parent = template.output or default_run_dir(template.label or f"embedded-{engine.model}")
    parent.mkdir(parents=True, exist_ok=True)
    endpoint = ResolvedEndpoint(engine.base_url, None, None, "llamacpp")
    results: list[tuple[str, BenchResult]] = []
    for name, load in steps:
        settings = dataclasses.replace(
            template, endpoint=endpoint, model=engine.model, load=dataclasses.replace(load, seed=template.load.seed),
            output=parent / name, engine=engine.record,
        )
        progress: Progress | None = progress_for(name, load) if progress_for else None
        result = await BenchSession(settings, progress).run()
        results.append((name, result))
        if result.interrupted:
            break
    summary = profile_summary(results, engine.record)
    write_json(parent / "profile.json", summary)
    return ProfileResult(parent, results, engine.record, summary)


def profile_summary(results: list[tuple[str, BenchResult]], engine: dict[str, Any]) -> dict[str, Any]:
    first = results[0][1].summary if results else {}
    return {
        "kind": "embedded-profile",
        "engine": {k: engine.get(k) for k in ("engine", "version", "model_file", "threads", "parallel_slots")},
        "cold": first.get("cold"),
        "warm": {"ttft_ms": first.get("metrics", {}).get("ttft_ms"), "e2e_ms": first.get("metrics", {}).get("e2e_ms")},
        "steps": [step_row(n, r) for n, r in results],
    }
