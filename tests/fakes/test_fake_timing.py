"""The send log against the programmed schedule, load, and the subprocess lifecycle.

Timing checks run against a subprocess (its own GIL and event loop) and use
generous bounds: the machine running the tests may be busy.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tokenrace.fakes.fake_server import FakeServerProcess, spawn_fake_server

from .fake_helpers import Reply, apost, chat, get

TTFT_MS, ITL_MS, TOKENS = 20.0, 10.0, 15


@pytest.fixture(scope="module")
def child() -> Iterator[FakeServerProcess]:
    with spawn_fake_server({"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "output_tokens": TOKENS}) as server:
        yield server


def stream_once(server: FakeServerProcess) -> Reply:
    async def run() -> Reply:
        async with aiohttp.ClientSession() as session:
            return await apost(session, f"{server.base_url}/chat/completions", chat())

    return asyncio.run(run())


def test_send_stamps_follow_the_schedule(child: FakeServerProcess) -> None:
    child.reset()
    stream_once(child)
    (entry,) = child.log(wait_idle_s=2)
    assert entry["tcp_nodelay"] is True  # Nagle off: small events are not held back
    chunks = entry["chunks"]
    assert [c["kind"] for c in chunks] == ["role"] + ["content"] * TOKENS + ["done"]
    stamps = [c["t_ns"] for c in chunks]
    assert stamps == sorted(stamps) and entry["end_ns"] >= stamps[-1]
    assert stamps[0] - entry["arrival_ns"] < 20e6  # the role chunk goes out at once
    content = [c["t_ns"] for c in chunks if c["kind"] == "content"]
    deadlines = [entry["arrival_ns"] + round((TTFT_MS + i * ITL_MS) * 1e6) for i in range(TOKENS)]
    assert all(t >= d for t, d in zip(content, deadlines, strict=True))  # never early
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(content)]
    assert abs(statistics.median(gaps_ms) - ITL_MS) < 5
    assert abs((content[0] - entry["arrival_ns"]) / 1e6 - TTFT_MS) < 10


def test_client_and_server_share_the_clock(child: FakeServerProcess) -> None:
    child.reset()
    reply = stream_once(child)
    (entry,) = child.log(wait_idle_s=2)
    sent = [c["t_ns"] for c in entry["chunks"]]
    assert len(sent) == len(reply.arrival_ns)
    delays_ms = [(got - put) / 1e6 for got, put in zip(reply.arrival_ns, sent, strict=True)]
    assert min(delays_ms) >= 0  # causality: nothing arrives before it was sent
    assert statistics.median(delays_ms) < 20


async def four_at_once(server: FakeServerProcess) -> None:
    async with aiohttp.ClientSession() as session:
        url = f"{server.base_url}/chat/completions"
        await asyncio.gather(*(apost(session, url, chat()) for _ in range(4)))


def first_token_ms(entry: dict[str, Any]) -> float:
    return float((next(c["t_ns"] for c in entry["chunks"] if c["kind"] == "content") - entry["arrival_ns"]) / 1e6)


def test_ttft_grows_with_requests_in_flight() -> None:
    config = {"ttft_ms": 100, "itl_ms": 1, "output_tokens": 3, "load_ttft_ms": 30}

    with spawn_fake_server(config) as server:
        asyncio.run(four_at_once(server))
        log = server.log(wait_idle_s=2)
        assert server.stats()["max_in_flight"] == 4
    by_load = sorted(log, key=lambda e: e["in_flight_at_arrival"])
    assert [e["in_flight_at_arrival"] for e in by_load] == [0, 1, 2, 3]
    for entry in by_load:
        expected = 100 + 30 * entry["in_flight_at_arrival"]
        assert expected <= first_token_ms(entry) < expected + 25


def test_spawned_process_lifecycle() -> None:
    server = spawn_fake_server({"ttft_ms": 1})
    with server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.base_url == server.url + "/v1"
        assert get(f"{server.url}/health").json() == {"status": "ok"}
        assert server.proc.poll() is None
    assert server.proc.returncode == 0  # SIGTERM is a clean exit
    with pytest.raises(ProcessLookupError):
        os.kill(server.pid, 0)  # gone and reaped: no orphan, no zombie


def test_child_exits_when_parent_lets_go() -> None:
    server = spawn_fake_server({"ttft_ms": 1})
    try:
        assert server.proc.stdin is not None
        server.proc.stdin.close()  # what the OS does if the parent dies
        assert server.proc.wait(timeout=10) == 0
    finally:
        server.close()


def _cli(*args: str) -> subprocess.Popen[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    argv = [sys.executable, "-m", "tokenrace.fakes.fake_server", *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_command_line_ready_line_and_sigint(tmp_path: Path) -> None:
    config_file = tmp_path / "fake.json"
    config_file.write_text(json.dumps({"models": ["m1"], "ttft_ms": 1}))
    proc = _cli("--port", "0", "--host", "127.0.0.1", "--config-file", str(config_file))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY http://127.0.0.1:")
        url = line.split()[1]
        assert get(f"{url}/v1/models").json()["data"][0]["id"] == "m1"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert out == ""  # exactly one line, the READY line


def test_command_line_rejects_bad_config() -> None:
    proc = _cli("--port", "0", "--config", '{"ttft": 1}')
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "bad config" in err


@pytest.mark.slow
def test_slots_queue_the_requests_past_them() -> None:
    # 2 slots, each request holds one ~50 + 4 x 10 = 90 ms: of 4 sent at once, two wait for a slot,
    # and their first token comes about a whole request later (~140 ms).
    config = {"ttft_ms": 50, "itl_ms": 10, "output_tokens": 5, "slots": 2}

    with spawn_fake_server(config) as server:
        asyncio.run(four_at_once(server))
        log = server.log(wait_idle_s=2)
    ttfts = sorted(first_token_ms(e) for e in log)
    assert 50 <= ttfts[0] <= ttfts[1] < 75
    # Generous below: the queued requests may arrive a few ms after the first two.
    assert 120 <= ttfts[2] <= ttfts[3] < 50 + 90 + 40
