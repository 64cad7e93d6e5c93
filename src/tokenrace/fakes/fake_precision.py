"""How precisely does the fake server keep its schedule? A self-check.

    python -m tokenrace.fakes.fake_precision --streams 32 --itl-ms 5 --tokens 200

Spawns the fake server as a subprocess, runs N concurrent streams against it
with a raw aiohttp client, and compares each content chunk's send stamp in the
server's log with its programmed deadline (arrival + ttft + i*itl). Prints the
send-time error (late is positive) in microseconds, the server's CPU use and
the machine's load average: other processes competing for the CPU show up as a
long tail, so read p99 together with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from tokenrace.fakes.fake_server import FakeConfig, spawn_fake_server


def send_errors_ns(log: list[dict[str, Any]], ttft_ms: float, itl_ms: float) -> list[int]:
    """Send stamp minus deadline of every content chunk (tokens_per_chunk=1, no jitter/load)."""
    errors: list[int] = []
    for entry in log:
        content = [c for c in entry["chunks"] if c["kind"] == "content"]
        for i, chunk in enumerate(content):
            deadline = entry["arrival_ns"] + round((ttft_ms + i * itl_ms) * 1e6)
            errors.append(chunk["t_ns"] - deadline)
    return errors


async def _drive(base_url: str, streams: int, tokens: int) -> None:
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": tokens,
    }
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            async with session.post(f"{base_url}/chat/completions", json=body) as resp:
                async for _ in resp.content.iter_any():  # cheapest read: keep the client's CPU low
                    pass

        await asyncio.gather(*(one() for _ in range(streams)))


def _cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a process (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    streams: int = 32,
    itl_ms: float = 5.0,
    tokens: int = 200,
    ttft_ms: float = 20.0,
    spin_ms: float = 1.0,
) -> dict[str, float]:
    """Run the check; returns error percentiles in microseconds and the chunk count."""
    config = FakeConfig(ttft_ms=ttft_ms, itl_ms=itl_ms, output_tokens=tokens, spin_ms=spin_ms)
    with spawn_fake_server(config) as server:
        cpu_before, wall_before = _cpu_seconds(server.pid), time.monotonic()
        asyncio.run(_drive(server.base_url, streams, tokens))
        cpu_used = _cpu_seconds(server.pid) - cpu_before
        wall = time.monotonic() - wall_before
        errors = np.array(send_errors_ns(server.log(wait_idle_s=5), ttft_ms, itl_ms)) / 1e3
    p50, p90, p99 = np.percentile(errors, [50, 90, 99])
    return {
        "chunks": float(errors.size),
        "server_cpu_pct": 100 * cpu_used / wall,
        "load_avg_1m": os.getloadavg()[0],
        "p50_us": p50,
        "p90_us": p90,
        "p99_us": p99,
        "max_us": float(errors.max()),
        "min_us": float(errors.min()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Measure the fake server's send-time precision.")
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--spin-ms", type=float, default=1.0)
    args = parser.parse_args()
    result = measure(args.streams, args.itl_ms, args.tokens, spin_ms=args.spin_ms)
    print(" ".join(f"{k}={v:.1f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
