"""Workers as Ray actors on a real local Ray cluster: a head and two worker nodes on loopback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.conftest import require_module, run

from tokenrace.client.openai import Prompt, RequestOptions
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.load.prompts import single
from tokenrace.load.runner import Load, Runner
from tokenrace.load.worker_core import WorkerConfig
from tokenrace.load.workers import Dispatcher
from tokenrace.model.records import RequestRecord

require_module("ray", "pip install 'tokenrace[ray]'")

# Three Ray nodes on the machine, timed: never beside another test process (.ci/run).
pytestmark = pytest.mark.serial

from tokenrace.load.ray_workers import RayPool  # noqa: E402 - after the check that Ray is there

OTHER_CLOCK = "another-machine"  # one worker node declares a clock of its own: its offset is applied


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray(*args: str, env: dict[str, str]) -> None:
    ray_bin = str(Path(sys.executable).parent / "ray")
    p = subprocess.run([ray_bin, *args], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


def _stop(markers: tuple[str, ...]) -> None:
    """End this cluster's processes alone (found by its port and folder), never every Ray on the machine."""
    ours = [p for p in psutil.process_iter(["cmdline"]) if any(m in " ".join(p.info["cmdline"] or ()) for m in markers)]
    procs = {p.pid: p for p in ours}
    for p in ours:
        try:
            procs.update({c.pid: c for c in p.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
    for p in procs.values():
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(list(procs.values()), timeout=15)
    for p in alive:
        p.kill()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="trray", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    small = ["--num-cpus=1", "--object-store-memory=80000000", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    address = f"127.0.0.1:{port}"
    try:
        _ray("start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}", *small, env=env)
        _ray("start", f"--address={address}", *small, env=env)
        _ray("start", f"--address={address}", *small, env={**env, "TOKENRACE_CLOCK_ID": OTHER_CLOCK})
        yield address
    finally:
        _stop((address, temp))
        shutil.rmtree(temp, ignore_errors=True)


async def _bench(address: str, url: str, load: Load) -> tuple[Runner, RayPool, int, int]:
    config = WorkerConfig(url, "fake-model", options=RequestOptions(max_tokens=None), keep_awake=False)
    pool = RayPool(config, None, address)  # one actor per node
    await pool.start()
    dispatcher = Dispatcher(pool)

    async def finish(rec: RequestRecord, prompt: Prompt) -> None:
        return None

    runner = Runner(dispatcher.send, single("a b c"), load, finish, lead_ns=dispatcher.lead_ns)
    t_start = time.perf_counter_ns()
    try:
        await runner.run()
    finally:
        await pool.close()
    return runner, pool, t_start, time.perf_counter_ns()


@pytest.mark.slow
def test_actors_spread_over_the_nodes_with_one_exact_merge(ray_cluster: str) -> None:
    with FakeServerThread({"ttft_ms": 30, "itl_ms": 3, "output_tokens": 10}) as srv:
        load = Load(concurrency=6, requests=60, cold=False)
        runner, pool, t_start, t_end = run(_bench(ray_cluster, srv.base_url, load))
        stats = srv.stats()
    assert len(pool.links) == 3 and len({link.node for link in pool.links}) == 3  # SPREAD: one per node
    assert stats["max_in_flight"] == 6  # the one scheduler's C, over every node together
    recs = runner.records
    assert len(recs) == 60 and all(r.ok for r in recs) and {r.worker for r in recs} == {0, 1, 2}
    assert sorted(r.seq for r in recs) == list(range(60))
    own = [link for link in pool.links if link.identity is not None and link.identity.clock_id != OTHER_CLOCK]
    other = [link for link in pool.links if link not in own]
    assert len(other) == 1 and len(own) == 2
    for link in own:
        assert link.clock is not None and link.clock.shared and link.clock.applied_ns == 0
    moved = other[0].clock
    assert moved is not None and not moved.shared and moved.applied_ns == moved.offset_ns
    # Truly the same clock underneath, so the min-RTT estimate must sit within its own error bound.
    assert abs(moved.offset_ns) <= moved.error_ns
    for r in recs:  # every stamp, moved or not, lies inside the parent's own view of the run
        assert r.end_ns is not None and t_start <= r.start_ns < r.first_token_ns <= r.end_ns <= t_end


@pytest.mark.slow
def test_open_loop_over_ray_keeps_the_schedule(ray_cluster: str) -> None:
    with FakeServerThread({"ttft_ms": 300, "itl_ms": 20, "output_tokens": 5}) as srv:
        load = Load(rate=20, arrival="constant", requests=30, cold=False)
        runner, _, _, _ = run(_bench(ray_cluster, srv.base_url, load))
    recs = sorted(runner.records, key=lambda r: r.seq)
    assert all(r.ok for r in recs)
    lags = sorted((r.start_ns - r.intended_start_ns) / 1e6 for r in recs if r.intended_start_ns is not None)
    # Within the applied offset's error bound (a ms or so here) plus a shared machine's noise.
    assert lags[len(lags) // 2] < 5 and lags[-1] < 100


@pytest.mark.slow
def test_bench_over_ray_records_each_nodes_clock_in_the_manifest(ray_cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FakeServerThread({"ttft_ms": 10, "itl_ms": 2, "output_tokens": 8}) as srv:
        argv = ["bench", "--url", srv.base_url, "--requests", "30", "--concurrency", "4", "--ray", ray_cluster]
        p = subprocess.run(
            [sys.executable, "-m", "tokenrace", *argv, "-o", str(out), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert p.returncode == 0, p.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    workers = manifest["workers"]
    assert workers["kind"] == "ray" and workers["count"] == 3 and workers["ray_address"] == ray_cluster
    for w in workers["workers"]:
        assert w["node"] and w["clock_rtt_ns"] > 0 and abs(w["clock_offset_ns"]) <= w["clock_error_ns"]
    assert sum(1 for w in workers["workers"] if w["clock_applied_ns"] != 0 or not w["clock_shared"]) == 1
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 31 and {r["worker"] for r in records} == {0, 1, 2}
    assert json.loads(p.stdout)["requests"]["succeeded"] == 30
