"""The /metrics scraper against llama.cpp's real server (the embedded engine passes --metrics)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.conftest import wait_until_async
from tests.integration.conftest import require_embedded

from tokenrace.monitor import MonitorSession, load_timeseries, metrics_url_for
from tokenrace.serve.embedded import EmbeddedOptions
from tokenrace.serve.launch import RunningEngine, start_embedded

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def engine() -> Iterator[RunningEngine]:
    require_embedded()
    eng = asyncio.run(start_embedded(EmbeddedOptions()))
    try:
        yield eng
    finally:
        eng.stop()


def test_llama_server_metrics_for_real(engine: RunningEngine, tmp_path: Path) -> None:
    async def go() -> dict[str, Any]:
        m = MonitorSession(tmp_path, 0.25, metrics_url_for(engine.base_url), gpu=False)
        await m.start()
        await wait_until_async(lambda: m.samples >= 1, what="a scrape")  # before the request: the next has a delta
        body = {"model": engine.model, "messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 24}
        async with aiohttp.ClientSession() as s, s.post(f"{engine.base_url}/chat/completions", json=body) as resp:
            assert resp.status == 200
            await resp.read()
        before = m.samples  # the next sample may have begun during the request: the one after it did not
        await wait_until_async(lambda: m.samples >= before + 2, what="2 scrapes after the request")
        return (await m.stop()).model_dump()

    r = asyncio.run(go())
    assert r["samplers"]["server"] == {"status": "ok", "reason": None, "errors": 0}
    assert r["server"]["engine"] == "llamacpp"
    samples = [s.server.model_dump() for s in load_timeseries(tmp_path) if s.server]
    assert samples and all(isinstance(s["running"], int) and isinstance(s["waiting"], int) for s in samples)
    # The request's generated tokens show up as a rate between two scrapes.
    assert any((s["generation_tokens_per_s"] or 0) > 0 for s in samples), samples
