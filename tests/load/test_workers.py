"""Worker processes: one scheduler in the parent, sends from several processes, every record kept."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from tests.conftest import run, wait_until_async

from tokenrace.client.openai import Prompt, RequestOptions
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.figures.summary import summarize
from tokenrace.load.clocks import ClockOffset, best_offset, to_parent_clock, to_worker_clock
from tokenrace.load.prompts import single
from tokenrace.load.runner import Load, Runner
from tokenrace.load.worker_core import WorkerConfig, WorkerCore
from tokenrace.load.workers import Dispatcher, ProcessPool, merge, peak_in_flight, pick_workers
from tokenrace.model.records import CLOCK_STAMPS, DURATIONS_NS, SCHEDULER_STAMPS, RequestRecord


def test_pick_workers_covers_both_ceilings_within_the_cpus() -> None:
    assert pick_workers(None, 8, 6000, 32, cpus=16) == 1
    assert pick_workers(20_000, 8, 6000, 32, cpus=16) == 4  # chunk rate decides
    assert pick_workers(1000, 100, 6000, 32, cpus=16) == 4  # streams decide
    assert pick_workers(1e6, 1000, 6000, 32, cpus=3) == 3  # never more than the CPUs
    assert pick_workers(0, 1, 6000, 32, cpus=0) == 1
    with pytest.raises(ValueError):
        pick_workers(100, 1, 0, 32, cpus=4)


def test_every_ns_field_of_a_record_is_classified_for_clock_changes() -> None:
    stamps = {name for name in RequestRecord.model_fields if name.endswith("_ns")}
    assert stamps == set(CLOCK_STAMPS) | set(SCHEDULER_STAMPS) | set(DURATIONS_NS) | {"chunk_ns"}


def test_min_rtt_probe_is_kept_and_bounds_the_error() -> None:
    # worker clock = parent + 1_000_000; probes with round trips 900, 100 (asymmetric) and 500 ns
    samples = [(0, 1_000_800, 900), (2000, 1_002_090, 2100), (5000, 1_005_100, 5500)]
    offset, rtt = best_offset(samples)
    assert rtt == 100 and abs(offset - 1_000_000) <= rtt // 2


def test_a_remote_workers_stamps_move_to_the_parent_clock() -> None:
    clock = ClockOffset(offset_ns=5_000, rtt_ns=200, probes=4, shared=False)
    got = RequestRecord(seq=9, start_ns=15_000, first_token_ns=16_000, end_ns=18_000, connect_ns=300)
    got.chunk_ns = [16_000, 17_000]
    got.output_tokens = 2
    rec = RequestRecord(seq=3, intended_start_ns=9_000, worker=1)
    merge(rec, got, clock)
    assert (rec.seq, rec.worker, rec.intended_start_ns) == (3, 1, 9_000)  # the parent's own fields
    assert (rec.start_ns, rec.first_token_ns, rec.end_ns, rec.chunk_ns) == (10_000, 11_000, 13_000, [11_000, 12_000])
    assert rec.connect_ns == 300  # a duration: unchanged
    assert to_worker_clock(9_000, clock) == 14_000
    shared = ClockOffset(offset_ns=40, rtt_ns=200, probes=4, shared=True)
    kept = RequestRecord(seq=1, start_ns=100)
    to_parent_clock(kept, shared)
    assert kept.start_ns == 100  # one kernel, one clock: a probe's noise is never applied


def test_perf_counter_ns_is_one_clock_for_every_process_of_the_machine() -> None:
    t1 = time.perf_counter_ns()
    out = subprocess.run([sys.executable, "-c", "import time; print(time.perf_counter_ns())"], capture_output=True)
    t2 = time.perf_counter_ns()
    assert t1 < int(out.stdout) < t2  # a fresh process reads the parent's clock, not one of its own


def _config(url: str) -> WorkerConfig:
    return WorkerConfig(url, "fake-model", options=RequestOptions(max_tokens=None), keep_awake=False)


async def _workers_run(url: str, load: Load, count: int, kill_after: int | None = None) -> tuple[Runner, Dispatcher]:
    pool = ProcessPool(_config(url), count)
    await pool.start()
    dispatcher = Dispatcher(pool)
    finished = 0

    async def finish(rec: RequestRecord, prompt: Prompt) -> None:
        nonlocal finished
        rec.settle(0)  # as the run store does when it writes the record
        finished += 1
        if finished == kill_after:
            os.kill(pool.links[1].process.pid, signal.SIGKILL)

    runner = Runner(dispatcher.send, single("a b c"), load, finish, lead_ns=dispatcher.lead_ns)
    try:
        await runner.run()
    finally:
        await pool.close()
    return runner, dispatcher


@pytest.mark.slow
def test_closed_loop_keeps_exactly_c_in_flight_over_all_workers() -> None:
    with FakeServerThread({"ttft_ms": 30, "itl_ms": 2, "output_tokens": 10}) as srv:
        runner, dispatcher = run(_workers_run(srv.base_url, Load(concurrency=6, requests=60, cold=False), 3))
        stats = srv.stats()
    assert stats["max_in_flight"] == 6  # not 6 per worker
    assert len(runner.records) == 60 and all(r.ok for r in runner.records)
    assert {r.worker for r in runner.records} == {0, 1, 2}
    assert sum(dispatcher.sent) == 60 and min(dispatcher.sent) >= 10
    assert sorted(r.seq for r in runner.records) == list(range(60))
    assert peak_in_flight(runner.records) <= 6
    s = summarize(runner.records, runner.windows)
    assert s.requests.succeeded == 60 and s.metrics.ttft_ms.count == 60


@pytest.mark.slow
def test_open_loop_keeps_the_schedule_across_workers() -> None:
    with FakeServerThread({"ttft_ms": 400, "itl_ms": 20, "output_tokens": 10}) as srv:
        load = Load(rate=20, arrival="constant", requests=30, cold=False)
        runner, _ = run(_workers_run(srv.base_url, load, 2))
        stats = srv.stats()
    recs = sorted(runner.records, key=lambda r: r.seq)
    assert all(r.ok for r in recs) and {r.worker for r in recs} == {0, 1}
    lags = [r.schedule_lag_ms for r in recs]
    assert float(np.median(np.array(lags, dtype=float))) < 5 and max(lags) < 100  # generous: a shared machine
    intended = np.array([r.intended_start_ns for r in recs]) / 1e9
    assert np.allclose(np.diff(intended), 1 / 20, atol=1e-6)  # the parent's schedule, untouched
    starts = np.array([r.start_ns for r in recs]) / 1e9
    assert abs((starts[-1] - starts[0]) - 29 / 20) < 0.1
    assert stats["max_in_flight"] >= 8  # slow responses never held the sends back


@pytest.mark.slow
def test_a_killed_worker_loses_only_its_requests_in_flight_and_is_named() -> None:
    with FakeServerThread({"ttft_ms": 50, "itl_ms": 5, "output_tokens": 10}) as srv:
        load = Load(concurrency=4, requests=60, cold=False)
        runner, dispatcher = run(_workers_run(srv.base_url, load, 2, kill_after=10))
    assert len(runner.records) == 60  # every request the scheduler sent has a record
    lost = [r for r in runner.records if r.error_kind == "worker_lost"]
    assert 1 <= len(lost) <= 4 and all(r.worker == 1 for r in lost)
    assert all(r.ok for r in runner.records if r.error_kind != "worker_lost")
    late = [r for r in runner.records if r.seq > max(x.seq for x in lost)]
    assert late and all(r.worker == 0 for r in late)  # the run went on over the worker left
    deaths = dispatcher.deaths()
    assert len(deaths) == 1 and deaths[0].startswith("worker 1 (pid") and "killed by SIGKILL" in deaths[0]
    assert "worker 1" in lost[0].error_message


@pytest.mark.slow
def test_cancelling_the_run_returns_each_workers_cancelled_records() -> None:
    async def go(srv: FakeServerThread) -> Runner:
        pool = ProcessPool(_config(srv.base_url), 2)
        await pool.start()
        dispatcher = Dispatcher(pool)

        async def finish(rec: RequestRecord, prompt: Prompt) -> None:
            return None

        runner = Runner(dispatcher.send, single("a"), Load(concurrency=4, requests=1000, cold=False), finish)
        task = asyncio.create_task(runner.run())
        await wait_until_async(lambda: sum(r.ok for r in runner.records) >= 4, what="4 finished requests")
        # The next four have reached the server (its own thread answers stats() while this loop waits)...
        await wait_until_async(
            lambda: (s := srv.stats())["requests"] >= 8 and s["in_flight"] == 4, what="the next 4 at the server"
        )
        # ...and, by the fake's programmed timing (first token 20 ms after arrival, then one every 50 ms
        # of a 2 s answer), 0.2 s later each is mid-answer: the cut keeps the chunks that came.
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await pool.close()
        return runner

    with FakeServerThread({"ttft_ms": 20, "itl_ms": 50, "output_tokens": 40}) as srv:
        runner = run(go(srv))
    cancelled = [r for r in runner.records if r.error_kind == "cancelled"]
    assert len(cancelled) == 4  # the four in flight, each recorded by the worker that sent it
    # Each record is the worker's own (the client's message and stamps), not a stand-in from the parent.
    assert all(r.error_message == "interrupted before the response ended" for r in cancelled), [
        r.error_message for r in cancelled
    ]
    assert any(r.chunk_ns for r in cancelled)  # streams cut mid-answer keep the chunks that arrived


def test_a_client_defect_in_a_worker_becomes_a_record_not_a_hang() -> None:
    async def go() -> RequestRecord:
        core = WorkerCore(_config("http://127.0.0.1:9"))
        await core.open()
        try:
            # A prompt the client cannot serialise: the client raises instead of recording a failure.
            bad = Prompt(messages=[{"role": "user", "content": object()}])  # type: ignore[typeddict-item]
            return await core.job(0, None, bad, RequestRecord(seq=0))
        finally:
            await core.close()

    rec = run(go())
    assert rec.error_kind == "worker_error" and "TypeError" in (rec.error_message or "")
    assert rec.end_ns is not None and rec.end_ns >= rec.start_ns > 0
