from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tests.conftest import run, wait_until_async

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.figures.summary import summarize
from tokenrace.load.prompts import single
from tokenrace.load.runner import Load, Runner
from tokenrace.model.records import RequestRecord


async def _run(base_url: str, load: Load) -> Runner:
    async with OpenAIClient(base_url, "fake-model", options=RequestOptions(max_tokens=None)) as c:

        async def finish(rec: RequestRecord, prompt: Prompt) -> None:
            rec.settle(0)  # as the run store does when it writes the record

        runner = Runner(c.send, single("a b c"), load, finish)
        await runner.run()
        return runner


def test_closed_loop_keeps_exactly_n_in_flight() -> None:
    with FakeServerThread({"ttft_ms": 20, "itl_ms": 2, "output_tokens": 10}) as srv:
        runner = run(_run(srv.base_url, Load(concurrency=6, requests=60, cold=False)))
        stats = srv.stats()
    assert stats["max_in_flight"] == 6
    assert runner.windows.max_in_flight == 6
    assert len(runner.records) == 60 and all(r.ok for r in runner.records)
    assert runner.windows.steady_start_ns < runner.windows.steady_end_ns


@pytest.mark.slow
def test_open_loop_keeps_its_schedule_when_the_server_is_slow() -> None:
    # Each response takes ~1 s; at 20 req/s a closed loop would send 1 per second per worker.
    with FakeServerThread({"ttft_ms": 500, "itl_ms": 50, "output_tokens": 10}) as srv:
        runner = run(_run(srv.base_url, Load(rate=20, arrival="constant", requests=30, cold=False)))
        stats = srv.stats()
    recs = sorted(runner.records, key=lambda r: r.seq)
    lags = [r.schedule_lag_ms for r in recs]
    assert max(lags) < 50  # generous: sends are not held back by slow responses
    starts = np.array([r.start_ns for r in recs]) / 1e9
    assert abs((starts[-1] - starts[0]) - 29 / 20) < 0.1
    assert stats["max_in_flight"] >= 15
    s = summarize(recs, runner.windows)
    assert s.offered_rate == 20 and abs(s.achieved_rate - 20) < 2


@pytest.mark.slow
def test_open_loop_cap_delays_sends_and_shows_lag() -> None:
    with FakeServerThread({"ttft_ms": 200, "itl_ms": 10, "output_tokens": 5}) as srv:
        runner = run(_run(srv.base_url, Load(rate=50, arrival="constant", requests=20, max_concurrency=2, cold=False)))
        stats = srv.stats()
    assert stats["max_in_flight"] <= 2
    lags = [r.schedule_lag_ms for r in runner.records]
    assert max(lags) > 500  # the cap, not the schedule, set the pace: reported, not hidden


def test_cold_and_warmup_are_recorded_but_not_measured() -> None:
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 4}) as srv:
        runner = run(_run(srv.base_url, Load(concurrency=2, requests=6, warmup=3, cold=True)))
    phases = [r.phase for r in sorted(runner.records, key=lambda r: r.seq)]
    assert phases == ["cold"] + ["warmup"] * 3 + ["measure"] * 6
    s = summarize(runner.records, runner.windows)
    assert s.requests.total == 6 and s.cold.seq == 0 and s.cold.ttft_ms is not None


def test_duration_stop_rule() -> None:
    with FakeServerThread({"ttft_ms": 10, "itl_ms": 1, "output_tokens": 4}) as srv:
        runner = run(_run(srv.base_url, Load(concurrency=2, duration_s=0.5, cold=False)))
    last_start = max(r.start_ns for r in runner.records)
    first_start = min(r.start_ns for r in runner.records)
    assert (last_start - first_start) / 1e9 < 0.6 and len(runner.records) > 4


def test_cancellation_keeps_finished_records() -> None:
    async def go() -> Runner:
        with FakeServerThread({"ttft_ms": 50, "itl_ms": 5, "output_tokens": 10}) as srv:
            async with OpenAIClient(srv.base_url, "fake-model", options=RequestOptions(max_tokens=None)) as c:

                async def finish(rec: RequestRecord, prompt: Prompt) -> None:
                    return None

                runner = Runner(c.send, single("x"), Load(concurrency=2, requests=1000, cold=False), finish)
                task = asyncio.create_task(runner.run())
                await wait_until_async(lambda: any(r.ok for r in runner.records), what="a finished request")
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                return runner

    runner = run(go())
    kinds = {r.error_kind for r in runner.records}
    assert any(r.ok for r in runner.records) and "cancelled" in kinds
