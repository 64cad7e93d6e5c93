"""What does a shared rate limit cost a request? The Redis token bucket against the in-memory one.

Starts Debian's `redis-server` on a free port (no persistence) and times, with perf_counter_ns(),
`SharedState.take` (one EVALSHA round trip: the Lua token bucket) from one asyncio task at a time
(latency) and from `--concurrency` tasks at once (throughput of one gateway process), then the
in-memory `TokenBucket.take` the gateway uses without `state:`.

`--gateway N` then runs a real `tokenrace gateway` process twice, without and with `state:`, in
front of the fake server (no delay, non-streaming), with a rate-limited client key, and times N
requests one after another on one keep-alive connection: the difference of the two latency
distributions is what the shared rate limit adds to a request.

    python benchmarks/shared_state_cost.py                    # 5000 calls
    python benchmarks/shared_state_cost.py --calls 20000 --concurrency 64
    python benchmarks/shared_state_cost.py --calls 2000 --gateway 3000
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import yaml

from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.gateway.config import RateLimitConfig, Secret, StateConfig
from tokenrace.gateway.ratelimit import TokenBucket
from tokenrace.gateway.shared import SharedState
from tokenrace.stats import describe

CLIENT_KEY = "bench-client-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def summary(name: str, ns: list[int]) -> str:
    d = describe([x / 1000 for x in ns])
    return f"{name:<34} n={d.count:<6} p50 {d.p50:8.1f} us   p99 {d.p99:8.1f} us   mean {d.mean:8.1f} us"


async def measure(url: str, calls: int, concurrency: int) -> None:
    config = StateConfig(redis_url_env="UNUSED", timeout_s=1.0)
    shared = SharedState(config, Secret(url), lambda *a, **k: None, lambda *a, **k: None, lambda: None)
    shared.up = True
    rate, capacity = 1e9, 1e9  # never limits: every call takes the full path and admits
    for _ in range(200):  # warm: the connection, the script cache
        await shared.take("bench", rate, capacity)

    one: list[int] = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        answered, _ = await shared.take("bench", rate, capacity)
        one.append(time.perf_counter_ns() - t0)
        assert answered
    print(summary("redis bucket, 1 task", one))

    many: list[int] = []

    async def worker(n: int) -> None:
        for _ in range(n):
            t0 = time.perf_counter_ns()
            await shared.take("bench", rate, capacity)
            many.append(time.perf_counter_ns() - t0)

    t0 = time.perf_counter_ns()
    await asyncio.gather(*(worker(calls // concurrency) for _ in range(concurrency)))
    wall_s = (time.perf_counter_ns() - t0) / 1e9
    print(summary(f"redis bucket, {concurrency} tasks", many))
    print(f"{'':<34} {len(many) / wall_s:,.0f} takes/s from one process")
    await shared.close()

    bucket = TokenBucket(RateLimitConfig(rps=rate, burst=int(capacity)), time.monotonic())
    local: list[int] = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        bucket.take(time.monotonic())
        local.append(time.perf_counter_ns() - t0)
    print(summary("in-memory bucket", local))


def gateway_latencies(fake_url: str, redis_url: str | None, n: int, workdir: Path) -> tuple[list[int], float]:
    """n sequential requests through a gateway process (with `state:` when redis_url is given):
    their latencies (ns) and the gateway process's CPU seconds per request."""
    doc: dict[str, object] = {
        "backends": {"fake": {"url": fake_url}},
        "routes": [{"model": "m", "backends": ["fake"]}],
        "auth": {"keys": [{"name": "bench", "key_env": "BENCH_KEY", "rate_limit": {"rps": 1e6, "burst": 1000000}}]},
    }
    if redis_url is not None:
        doc["state"] = {"redis_url_env": "BENCH_REDIS_URL", "key_prefix": f"bench:{os.getpid()}"}
    path = workdir / ("shared.yaml" if redis_url else "local.yaml")
    path.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "BENCH_KEY": CLIENT_KEY, "BENCH_REDIS_URL": redis_url or ""}
    argv = [sys.executable, "-m", "tokenrace", "gateway", "--config", str(path), "--port", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        url = urlsplit(proc.stdout.readline().decode().split()[1])
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=10)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False})
        headers = {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"}
        out: list[int] = []
        gateway = psutil.Process(proc.pid)
        cpu0 = 0.0
        for i in range(n + 200):  # the first 200 warm the connections
            if i == 200:
                cpu0 = sum(gateway.cpu_times()[:2])
            t0 = time.perf_counter_ns()
            conn.request("POST", "/v1/chat/completions", body, headers)
            resp = conn.getresponse()
            resp.read()
            if i >= 200:
                out.append(time.perf_counter_ns() - t0)
            assert resp.status == 200, resp.status
        return out, (sum(gateway.cpu_times()[:2]) - cpu0) / n
    finally:
        proc.terminate()
        proc.wait(20)


def through_gateway(redis_url: str, n: int) -> None:
    with spawn_fake_server({"ttft_ms": 0, "itl_ms": 0, "output_tokens": 4, "models": ["m"]}) as fake:
        with tempfile.TemporaryDirectory() as workdir:
            local, local_cpu = gateway_latencies(fake.base_url, None, n, Path(workdir))
            shared, shared_cpu = gateway_latencies(fake.base_url, redis_url, n, Path(workdir))
    print(summary("request via gateway, memory", local) + f"   cpu {local_cpu * 1e6:6.1f} us/req")
    print(summary("request via gateway, redis", shared) + f"   cpu {shared_cpu * 1e6:6.1f} us/req")
    a, b = describe(local), describe(shared)
    for key in ("p50", "p99"):
        va, vb = getattr(a, key), getattr(b, key)
        assert va is not None and vb is not None
        print(f"{'':<34} added {key}: {(vb - va) / 1000:+.1f} us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--gateway", type=int, default=0, help="also time N requests through a gateway process")
    parser.add_argument(
        "--unix",
        action="store_true",
        help="the bucket calls over a Unix socket, as the workers of one gateway reach the supervisor's redis-server",
    )
    args = parser.parse_args()
    server = shutil.which("redis-server")
    if server is None:
        print("needs redis-server (apt-get install redis-server)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        sock = Path(workdir) / "redis.sock"
        argv += ["--unixsocket", str(sock), "--unixsocketperm", "700"]
        proc = subprocess.Popen([*argv, "--dir", workdir], stdout=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            where = f"unix socket {sock}" if args.unix else f"port {port}"
            print(f"redis-server on {where}, {args.calls} calls; python {sys.version.split()[0]}")
            url = f"unix://{sock}" if args.unix else f"redis://127.0.0.1:{port}/0"
            asyncio.run(measure(url, args.calls, args.concurrency))
            if args.gateway:
                through_gateway(f"redis://127.0.0.1:{port}/0", args.gateway)
        finally:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
