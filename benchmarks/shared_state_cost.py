"""What does a shared rate limit cost a request? The Redis token bucket against the in-memory one.

Starts Debian's `redis-server` on a free port (no persistence) and times, with perf_counter_ns(),
`SharedState.take` (one EVALSHA round trip: the Lua token bucket) from one asyncio task at a time
(latency) and from `--concurrency` tasks at once (throughput of one gateway process), then the
in-memory `TokenBucket.take` the gateway uses without `state:`.

    python benchmarks/shared_state_cost.py                    # 5000 calls
    python benchmarks/shared_state_cost.py --calls 20000 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from tokenrace.gateway.config import RateLimitConfig, Secret, StateConfig
from tokenrace.gateway.ratelimit import TokenBucket
from tokenrace.gateway.shared import SharedState
from tokenrace.stats import describe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def summary(name: str, ns: list[int]) -> str:
    d = describe([x / 1000 for x in ns])
    return f"{name:<34} n={d['count']:<6} p50 {d['p50']:8.1f} us   p99 {d['p99']:8.1f} us   mean {d['mean']:8.1f} us"


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    server = shutil.which("redis-server")
    if server is None:
        print("needs redis-server (apt-get install redis-server)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen([*argv, "--dir", workdir], stdout=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            print(f"redis-server {port}, {args.calls} calls; python {sys.version.split()[0]}")
            asyncio.run(measure(f"redis://127.0.0.1:{port}/0", args.calls, args.concurrency))
        finally:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
