"""`tokenrace gateway --workers N`: real processes on one loopback port under a supervisor.

Without `state:` the workers share one state through the supervisor's private redis-server, so a
rate limit is one bucket for the machine; /metrics and /admin/state answer for every worker; a
worker killed with SIGKILL is replaced while the others serve; SIGHUP reloads all, SIGTERM drains
all.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tokenrace.errors import InvalidInput
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.gateway import admin
from tokenrace.gateway.app import Gateway
from tokenrace.gateway.config import parse_config, resolve_secrets
from tokenrace.gateway.prompt_tokens import PromptTokenizer
from tokenrace.gateway.supervisor import worker_count
from tokenrace.gateway.views import GatewayState
from tokenrace.gateway.workers import merge_metrics, merge_state

from .conftest import require_redis_server
from .helpers import AUTH, CLIENT_KEY, ENV, ROOT, config_text, http, spawn_gateway
from .test_shared_state import admin_state, stop, wait_for

TEARDOWN_S = 0.1  # from kill() to the kernel closing the killed worker's sockets, on a loaded machine
FAST = {"ttft_ms": 2, "itl_ms": 1, "output_tokens": 4, "models": ["m"]}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServerThread]:
    with FakeServerThread(FAST) as srv:
        yield srv


class Workers:
    """workers(backends, routes, **extra) -> url: a supervisor with two workers, stopped after the test."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "gateway.yaml"
        self.proc: subprocess.Popen[bytes] | None = None

    def __call__(self, backends: dict[str, Any], routes: list[dict[str, Any]], **extra: Any) -> str:
        require_redis_server()
        self.path.write_text(config_text(backends, routes, **extra))
        self.proc, url = spawn_gateway(self.path, workers=2)
        return url


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(tmp_path)
    yield workers
    if workers.proc is not None:
        stop(workers.proc)


def ask(url: str, **body: Any) -> int:
    """One non-streaming request on a new connection (the kernel picks the worker per connection)."""
    status, _, _ = http(
        "POST", url + "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}
    )
    return status


def answered_by_each(url: str) -> list[int]:
    return [w["answered_requests"] for w in admin_state(url)["workers"]]


# --- the flag ----------------------------------------------------------------------------------------


def test_the_worker_count_is_checked() -> None:
    assert worker_count("auto", False, cores=4) == 4 and worker_count("3", False, cores=4) == 3
    assert worker_count("8", True, cores=4) == 8
    for value, problem in (("0", "at least 1"), ("-2", "at least 1"), ("5", "--force"), ("many", "'auto'")):
        with pytest.raises(InvalidInput, match=problem) as err:
            worker_count(value, False, cores=4)
        assert err.value.param == "workers"


@pytest.mark.slow
@pytest.mark.parametrize("value", ["0", "999"])
def test_bad_worker_counts_exit_2_naming_the_flag(tmp_path: Path, value: str) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text({"a": {"url": "http://127.0.0.1:9/v1"}}, [{"model": "m", "backends": ["a"]}]))
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "tokenrace", "gateway", "--config", str(path), "--port", "0", "--workers", value]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--workers:" in done.stderr and done.stdout == ""


@pytest.mark.slow
def test_without_redis_server_several_workers_are_refused_before_starting(tmp_path: Path) -> None:
    """No `state:` and no redis-server to share one through: exit 2 naming the flag, nothing left running."""
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text({"a": {"url": "http://127.0.0.1:9/v1"}}, [{"model": "m", "backends": ["a"]}]))
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT / "src"), "PATH": str(tmp_path / "empty")}
    argv = [
        sys.executable,
        "-m",
        "tokenrace",
        "gateway",
        "--config",
        str(path),
        "--port",
        "0",
        "--workers",
        "2",
        "--force",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--workers:" in done.stderr and "redis-server" in done.stderr and done.stdout == ""


# --- one gateway -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_rate_limit_is_one_bucket_across_the_workers(fake: FakeServerThread, two_workers: Workers) -> None:
    """2 rps with a burst of 4: asked without pause for T seconds, one bucket admits the 4 + 2T
    whole tokens it had (floor), give or take one, whichever worker each connection reaches; two
    buckets would admit 8 at once."""
    limited = {"keys": [{**AUTH["keys"][0], "rate_limit": {"rps": 2, "burst": 4}}]}
    url = two_workers({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], auth=limited)
    start = time.monotonic()
    statuses = [ask(url) for _ in range(24)]
    while time.monotonic() - start < 1.5:  # let the bucket refill a little, then empty it again
        statuses.append(ask(url))
    elapsed = time.monotonic() - start
    admitted = statuses.count(200)
    assert set(statuses) == {200, 429}
    assert abs(admitted - math.floor(4 + 2 * elapsed)) <= 1, (admitted, elapsed)
    by_worker = answered_by_each(url)
    assert len(by_worker) == 2 and min(by_worker) >= 3, by_worker  # both workers took requests
    state = admin_state(url)["state"]
    assert state["backend"] == "redis" and state["up"] is True and "2 workers" in state["shared_by"]


@pytest.mark.slow
def test_metrics_and_state_answer_for_every_worker(fake: FakeServerThread, two_workers: Workers) -> None:
    url = two_workers({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}])
    for _ in range(20):
        assert ask(url) == 200
    by_worker = answered_by_each(url)
    assert sum(by_worker) == 20 and min(by_worker) >= 1, by_worker
    for _ in range(4):  # whichever worker takes the scrape, it counts all 20
        _, _, raw = http("GET", url + "/metrics", key=None)
        lines = [ln for ln in raw.decode().splitlines() if ln.startswith("tokenrace_gateway_requests_total{")]
        assert sum(float(ln.rsplit(" ", 1)[1]) for ln in lines) == 20, lines
    state = admin_state(url)
    assert [w["index"] for w in state["workers"]] == [0, 1] and all(w["answered"] for w in state["workers"])
    assert len({w["pid"] for w in state["workers"]}) == 2


def test_merged_metrics_sum_counts_and_keep_shared_gauges() -> None:
    one = (
        "# TYPE tokenrace_gateway_requests counter\n"
        'tokenrace_gateway_requests_total{route="m",backend="a",status="200"} 3\n'
        "# TYPE tokenrace_gateway_in_flight gauge\n"
        'tokenrace_gateway_in_flight{route="m",backend="a"} 2\n'
        "# TYPE tokenrace_gateway_breaker_state gauge\n"
        'tokenrace_gateway_breaker_state{backend="a"} 2\n'
    )
    two = one.replace("} 3", "} 4").replace(
        "} 2\n# TYPE tokenrace_gateway_breaker", "} 1\n# TYPE tokenrace_gateway_breaker"
    )
    merged = merge_metrics([one, two]).decode()
    assert 'tokenrace_gateway_requests_total{backend="a",route="m",status="200"} 7.0' in merged
    assert 'tokenrace_gateway_in_flight{backend="a",route="m"} 3.0' in merged
    assert 'tokenrace_gateway_breaker_state{backend="a"} 2.0' in merged


class Keyed:
    """A request as a prefix_affinity pool sees it: only its key."""

    def __init__(self, key: str) -> None:
        self.key = key

    def affinity_key(self, header: str | None, prefix_chars: int) -> str | None:
        return self.key

    def prompt_tokens(self, tokenizer: PromptTokenizer) -> list[int] | None:
        return None  # no scored pool here


def worker_view(policy: str, keys: list[str]) -> GatewayState:
    """One worker's /admin/state: route m on a pool of a and b under `policy`, after a request per key."""
    pool = {"backend": ["a", "b"], "policy": policy}
    text = config_text(
        {n: {"url": f"http://127.0.0.1:{9 + i}/v1"} for i, n in enumerate("ab")}, [{"model": "m", "backends": [pool]}]
    )
    config = parse_config(text, env=ENV)
    gw = Gateway(config, resolve_secrets(config, ENV))
    target = gw.runtime.routes["m"].targets[0]
    for key in keys:
        target.pick(set(), time.monotonic(), Keyed(key))
    return admin.state(gw)


def test_keys_remembered_is_summed_over_workers_or_null_when_one_has_no_figure() -> None:
    """Each worker remembers its own keys' placements. A pool that has placed no key yet remembers
    none (0, defined); the whole gateway's figure is the workers' sum, but while a reload is half way
    and a worker runs the pool under another policy, that worker has no such figure and the sum of
    the others is not the gateway's: null, never a number."""
    fresh = worker_view("prefix_affinity", [])
    assert fresh.routes["m"].targets[0].routing.keys_remembered == 0
    two, one = worker_view("prefix_affinity", ["x", "y"]), worker_view("prefix_affinity", ["z"])
    merged = orjson.loads(merge_state({0: two, 1: one, 2: None}, 0).to_json())
    assert merged["routes"]["m"]["targets"][0]["routing"]["keys_remembered"] == 3
    reloading = worker_view("least_queue", [])
    merged = orjson.loads(merge_state({0: two, 1: reloading}, 0).to_json())
    pool = merged["routes"]["m"]["targets"][0]["routing"]
    assert "keys_remembered" in pool and pool["keys_remembered"] is None
    assert pool["moved"] is None


@pytest.mark.slow
def test_sighup_reloads_every_worker(fake: FakeServerThread, two_workers: Workers) -> None:
    url = two_workers({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}])
    backends = {"a": {"url": fake.base_url, "models": {"n": "m"}}}
    text = config_text(backends, [{"model": "m", "backends": ["a"]}, {"model": "n", "backends": ["a"]}])
    two_workers.path.write_text(text)
    assert two_workers.proc is not None
    two_workers.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: {w.get("generation") for w in admin_state(url)["workers"]} == {2}, 10, "both workers reloaded")
    assert ask(url, model="n") == 200


async def steady_load(url: str, stop_at: asyncio.Event, records: list[tuple[float, float, bool]]) -> None:
    """Four clients, each sending one stream after another on a new connection until `stop_at`."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "fake": {"itl_ms": 20, "output_tokens": 10},
    }
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}

    async def client() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            while not stop_at.is_set():
                start = time.monotonic()
                try:
                    async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as resp:
                        raw = await resp.read()
                        ok = resp.status == 200 and raw.rstrip().endswith(b"data: [DONE]") and b'"error"' not in raw
                except aiohttp.ClientError:
                    ok = False
                records.append((start, time.monotonic(), ok))

    await asyncio.gather(*(client() for _ in range(4)))


def replaced(url: str, pid: int) -> bool:
    """Both workers answer and `pid` is not one of them (a scrape the dying worker took fails: False)."""
    try:
        workers = admin_state(url)["workers"]
    except OSError:  # urllib's errors (refused, reset) are OSErrors
        return False
    return all(w["answered"] for w in workers) and pid not in [w["pid"] for w in workers]


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_only_its_requests_fail(fake: FakeServerThread, two_workers: Workers) -> None:
    url = two_workers({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}])
    victim = admin_state(url)["workers"][0]["pid"]
    records: list[tuple[float, float, bool]] = []

    async def scenario() -> float:
        stop_at = asyncio.Event()
        load = asyncio.create_task(steady_load(url, stop_at, records))
        await asyncio.sleep(1.0)  # a second of load before the kill
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        await asyncio.to_thread(wait_for, lambda: replaced(url, victim), 20, "the killed worker was not replaced")
        await asyncio.sleep(1.0)  # and a second of load on the replacement
        stop_at.set()
        await load
        return killed_at

    killed_at = asyncio.run(scenario())
    failed = [(start - killed_at, end - killed_at) for start, end, ok in records if not ok]
    # What fails: the requests in flight at the kill (at most the 4 clients' own), and new
    # connections the kernel hashed to the dying worker's socket while it was being torn down
    # (a client whose request failed asks again at once). Nothing that starts later fails.
    assert len(records) > 20, len(records)
    assert len([f for f in failed if f[0] <= 0]) <= 4, failed
    assert all(start <= TEARDOWN_S and end >= 0 for start, end in failed), failed
    assert all(ok for start, _, ok in records if start > killed_at + TEARDOWN_S)


@pytest.mark.slow
def test_sigterm_drains_every_worker_and_stops(fake: FakeServerThread, two_workers: Workers) -> None:
    url = two_workers({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}])
    assert two_workers.proc is not None
    pids = [w["pid"] for w in admin_state(url)["workers"]]
    records: list[tuple[float, float, bool]] = []

    async def scenario() -> None:
        stop_at = asyncio.Event()
        load = asyncio.create_task(steady_load(url, stop_at, records))
        await asyncio.sleep(0.5)
        stop_at.set()  # the clients send no new request after this one
        assert two_workers.proc is not None
        two_workers.proc.send_signal(signal.SIGTERM)
        await load

    asyncio.run(scenario())
    assert two_workers.proc.wait(30) == 0
    assert records and all(ok for _, _, ok in records)  # the streams in flight finished
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.slow
def test_a_killed_supervisor_leaves_no_worker_behind(fake: FakeServerThread, two_workers: Workers) -> None:
    url = two_workers({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}])
    assert two_workers.proc is not None
    pids = [w["pid"] for w in admin_state(url)["workers"]]
    assert all(running(p) for p in pids)
    two_workers.proc.kill()  # SIGKILL: the supervisor cannot pass anything on
    two_workers.proc.wait(10)
    wait_for(lambda: not any(running(p) for p in pids), 30, "workers outlived their supervisor")
