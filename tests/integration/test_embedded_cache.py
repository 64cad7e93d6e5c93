"""The prefix cache on the real embedded engine (llama.cpp + SmolLM2), read from the engine's own numbers.

Busted built-in prompts get (almost) nothing from the cache, so TTFT cannot fall with load because of
cache hits; a shared system prompt is served from the cache, and the engine's own prompt time drops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.conftest import embedded_engine

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.load.runner import Load
from tokenrace.load.workload import WorkloadSpec
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession
from tokenrace.runs.settings import BenchSettings
from tokenrace.serve.launch import RunningEngine

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def engine() -> Iterator[RunningEngine]:
    with embedded_engine(parallel=4, ctx_size=4096) as eng:
        yield eng


def bench(
    engine: RunningEngine, out: Path, workload: WorkloadSpec, extra: dict[str, Any] | None = None, **load: Any
) -> Run:
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(engine.base_url, None, None, "llamacpp"),
        request=RequestOptions(max_tokens=8, temperature=0.0, extra_body=extra or {}),
        load=Load(**{"cold": False, **load}),
        workload=workload,
        output=out,
        engine=engine.info,
    )
    return asyncio.run(BenchSession(settings, argv=["test"]).run())


def test_busted_builtin_prompts_miss_the_cache_at_every_load(engine: RunningEngine, tmp_path: Path) -> None:
    # The same built-in prompts twice over at each step: without busting, the second round would hit.
    steps = {c: bench(engine, tmp_path / f"c{c}", WorkloadSpec(), concurrency=c, requests=8) for c in (1, 4)}
    for c, r in steps.items():
        cache = r.summary.cache
        assert cache.busted is True and cache.source in ("usage", "engine")
        assert cache.requests_reporting == 8
        # What is left is the chat template's first tokens, common to every request.
        assert cache.hit_rate < 0.15, (c, cache)
    ttft = {c: r.summary.metrics.ttft_ms.p50 for c, r in steps.items()}
    assert ttft[4] >= 0.9 * ttft[1], ttft  # more load, no cache: TTFT does not fall


def test_a_shared_prefix_is_served_from_the_engines_cache(engine: RunningEngine, tmp_path: Path) -> None:
    spec = WorkloadSpec(shared_prefix_tokens=256, prefix_groups=1)
    shared = bench(engine, tmp_path / "shared", spec, concurrency=1, requests=6)
    # The same prompts with llama.cpp's prompt cache turned off for each request.
    off = bench(engine, tmp_path / "off", spec, extra={"cache_prompt": False}, concurrency=1, requests=6)
    hit_on, hit_off = shared.summary.cache.hit_rate, off.summary.cache.hit_rate
    assert hit_on > 0.6 and hit_off < 0.1, (hit_on, hit_off)
    # The engine's own prompt time (llama.cpp timings.prompt_ms), not the client's clock.
    engine_on = shared.summary.server_vs_client.ttft_ms.server_p50
    engine_off = off.summary.server_vs_client.ttft_ms.server_p50
    assert engine_on < 0.7 * engine_off, (engine_on, engine_off)
