"""A short soak (about 25 s) of mixed traffic: the gateway's memory stays flat.

Mixed means streams and whole responses, retries and fallbacks on failing requests, streams that die
mid-way and clients that leave early. The long version is `benchmarks/gateway_overhead.py --soak`.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from tokenrace.fakes.fake_server import spawn_fake_server

from .helpers import CLIENT_KEY, config_text, spawn_gateway

SOAK_S = 24.0
WARM_S = 6.0
CONCURRENCY = 12
STUCK_S = 15.0  # a request this long is stuck (the gateway's 504 would come only after its 120 s first-byte limit)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def a_body(rng: random.Random) -> dict[str, object]:
    body: dict[str, object] = {
        "model": "m",
        "messages": [{"role": "user", "content": "soak " * rng.randint(1, 50)}],
        "stream": rng.random() < 0.7,
    }
    roll = rng.random()
    if roll < 0.05:
        body["fake"] = {"fault": "disconnect_midstream"}
    elif roll < 0.10:
        body["fake"] = {"fault": "500"}
    elif roll < 0.12:
        body["model"] = "unknown"
    return body


async def drive(url: str, until: float, counts: dict[str, int]) -> None:
    rng = random.Random(0)
    headers = {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"}
    # A request that takes seconds against a 2 ms fake is stuck: it counts as "timeout", and fails the test.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=STUCK_S)) as session:

        async def worker() -> None:
            while time.monotonic() < until:
                leave_early = rng.random() < 0.05
                try:
                    async with session.post(
                        url + "/v1/chat/completions", data=orjson.dumps(a_body(rng)), headers=headers
                    ) as resp:
                        if leave_early:
                            await resp.content.readany()
                            resp.close()  # the client walks away mid-stream
                        else:
                            await resp.read()
                        counts[str(resp.status)] = counts.get(str(resp.status), 0) + 1
                except aiohttp.ClientError:
                    counts["client_error"] = counts.get("client_error", 0) + 1
                except TimeoutError:
                    counts["timeout"] = counts.get("timeout", 0) + 1

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


@pytest.mark.slow
def test_memory_stays_flat_under_mixed_traffic(tmp_path: Path) -> None:
    with spawn_fake_server({"ttft_ms": 2, "itl_ms": 1, "output_tokens": 16, "models": ["m"], "spin_ms": 0}) as fake:
        path = tmp_path / "gateway.yaml"
        backends = {
            "a": {"url": fake.base_url, "breaker": {"failures": 1000, "error_rate": None}},
            "b": {"url": fake.base_url},
        }
        path.write_text(
            config_text(
                backends,
                [{"model": "m", "backends": ["a"], "fallback": ["b"]}],
                retry={"attempts": 2, "backoff_ms": 1},
                log={"level": "error"},
            )
        )
        proc, url = spawn_gateway(path)
        try:
            counts: dict[str, int] = {}
            samples: list[tuple[float, float]] = []
            start = time.monotonic()

            async def main() -> None:
                load = asyncio.ensure_future(drive(url, start + SOAK_S, counts))
                while not load.done():
                    samples.append((time.monotonic() - start, rss_mib(proc.pid)))
                    await asyncio.sleep(1.0)
                await load

            asyncio.run(main())
        finally:
            proc.terminate()
            proc.wait(10)
    total = sum(counts.values())
    assert total > 1000 and counts.get("200", 0) > 0.8 * total, counts
    assert "timeout" not in counts and "504" not in counts, counts  # no request waited on a stuck connection
    warm = [rss for t, rss in samples if WARM_S <= t < WARM_S + 3]
    late = [rss for t, rss in samples if t >= SOAK_S - 4]
    growth = min(late) - min(warm)
    print(f"soak: {total} requests {counts}; RSS after warm-up {min(warm):.1f} MiB, at the end {min(late):.1f} MiB")
    assert growth < 3.0, f"RSS grew {growth:.1f} MiB over {SOAK_S - WARM_S:.0f} s: {samples}"
