"""The send is stamped at the socket: start is when the request's last byte reached the kernel.

The fake server runs in another process and stamps each request when its handler begins, after it
read the request off its socket; perf_counter_ns is CLOCK_MONOTONIC in both processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import run

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.client.transport import Timeouts
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.prompts import single
from tokenrace.load.runner import Load, Runner
from tokenrace.model.records import RequestRecord


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_fake_server({"ttft_ms": 40, "itl_ms": 2, "output_tokens": 6}) as srv:
        yield srv


async def _send(base_url: str, n: int, prompt: str = "one two three") -> list[RequestRecord]:
    async with OpenAIClient(base_url, "fake-model", options=RequestOptions(max_tokens=None)) as c:
        first = await c.send(Prompt(text=prompt), RequestRecord(seq=0))  # opens a connection
        rest = await asyncio.gather(*(c.send(Prompt(text=prompt), RequestRecord(seq=i + 1)) for i in range(n)))
        return [first, *rest]


@pytest.mark.slow
def test_start_is_the_send_after_the_clients_preparation(server: Any) -> None:
    server.reset()
    recs = run(_send(server.base_url, 4))
    log = {e["id"]: e for e in server.log(wait_idle_s=2)}
    assert recs[0].new_connection and recs[0].connect_ns is not None
    for r in recs:
        assert r.ok, r.error_message
        assert r.client_prep_ns is not None and r.client_prep_ns > 0
        # begin -> (connect) -> preparation -> send, and the send comes before the server has the request
        assert r.start_ns == r.begin_ns + (r.connect_ns or 0) + r.client_prep_ns
        assert r.start_ns > r.begin_ns
        arrived = log[r.response_id]["arrival_ns"]
        assert r.start_ns < arrived < r.start_ns + 1_000_000_000
        r.settle(r.begin_ns)
        assert r.client_prep_ms is not None and r.client_prep_ms > 0
        assert r.start_ms is not None and r.start_ms > 0
        # TTFT runs from the send: the server's 40 ms is all in it, the preparation is not
        assert r.ttft_ms is not None and r.ttft_ms >= 40.0
        assert r.first_token_ns is not None and r.first_token_ns - r.start_ns == pytest.approx(r.ttft_ms * 1e6, abs=1e3)


def test_a_body_the_kernel_cannot_take_at_once_is_stamped_when_it_drained(server: Any) -> None:
    # ~600 kB: more than a fresh loopback socket's send buffer takes in one write
    big = "word " * 120_000
    server.reset()
    recs = run(_send(server.base_url, 1, big))
    log = {e["id"]: e for e in server.log(wait_idle_s=2)}
    for r in recs:
        assert r.ok, r.error_message
        assert r.client_prep_ns is not None and r.client_prep_ns > 0
        assert r.start_ns < log[r.response_id]["arrival_ns"] + 1_000_000_000


def test_a_request_that_never_left_has_no_preparation_and_starts_at_begin() -> None:
    async def go() -> RequestRecord:
        opts = RequestOptions(max_tokens=None)
        async with OpenAIClient("http://127.0.0.1:9/v1", "m", options=opts, timeouts=Timeouts(connect=2)) as c:
            return await c.send(Prompt(text="x"), RequestRecord(seq=0))

    r = run(go())
    assert r.error_kind == "connection_refused"
    assert r.client_prep_ns is None and r.start_ns == r.begin_ns
    r.settle(r.begin_ns)
    assert r.client_prep_ms is None


def test_open_loop_lag_and_latency_from_intended_hold_the_preparation(server: Any) -> None:
    async def go() -> list[RequestRecord]:
        async with OpenAIClient(server.base_url, "fake-model", options=RequestOptions(max_tokens=None)) as c:

            async def finish(rec: RequestRecord, prompt: Prompt) -> None:
                rec.settle(0)  # as the run store does when it writes the record

            load = Load(rate=50.0, arrival="constant", requests=10, cold=False)
            return await Runner(c.send, single("hi"), load, finish).run()

    recs = run(go())
    assert len(recs) == 10
    for r in recs:
        assert r.ok, r.error_message
        assert r.intended_start_ns is not None and r.intended_start_ns <= r.begin_ns < r.start_ns
        # the lag is how late the request really left: the scheduler's lateness + preparation + connect
        assert r.schedule_lag_ms is not None and r.schedule_lag_ms > 0
        assert r.client_prep_ns is not None
        lag_ns = r.start_ns - r.intended_start_ns
        assert lag_ns >= r.client_prep_ns + (r.connect_ns or 0)
        assert r.ttft_from_intended_ms == pytest.approx(r.schedule_lag_ms + r.ttft_ms, abs=1e-3)
        assert r.e2e_from_intended_ms == pytest.approx(r.schedule_lag_ms + r.e2e_ms, abs=1e-3)
