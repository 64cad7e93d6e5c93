"""How exactly does the client time what the server sent?

Runs the fake server in a separate process (it logs `perf_counter_ns()` just before writing each SSE
event; CLOCK_MONOTONIC is shared between processes on Linux), drives it with tokenrace's client and
runner in this process, and prints the bias (client arrival stamp minus server send stamp) of the
first content chunk (TTFT bias) and of every chunk, p50/p99, and the achieved chunks/s.

    python benchmarks/client_accuracy.py            # the two scenarios + max chunk rate search
    python benchmarks/client_accuracy.py --quick    # the two scenarios only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time

import numpy as np

from tokenrace.client.openai import OpenAIClient, RequestOptions
from tokenrace.client.records import RequestRecord
from tokenrace.load.prompts import single
from tokenrace.load.runner import Load, Runner
from tokenrace.testing.fake_server import spawn_fake_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import stalls


async def drive(base_url: str, streams: int, requests: int) -> tuple[list[RequestRecord], float]:
    opts = RequestOptions(max_tokens=None)
    async with OpenAIClient(base_url, "fake-model", options=opts, max_connections=streams) as client:

        async def finish(rec: RequestRecord, prompt: object) -> None:
            return None

        runner = Runner(client.send, single("hello"), Load(concurrency=streams, requests=requests, cold=False), finish)
        t = time.perf_counter()
        records = await runner.run()
        return records, time.perf_counter() - t


def biases(records: list[RequestRecord], log: list[dict]) -> tuple[list[float], list[float]]:
    sent = {e["id"]: [c["t_ns"] for c in e["chunks"] if c["kind"] in ("content", "reasoning")] for e in log}
    ttft, every = [], []
    for r in records:
        s = sent.get(r.response_id)
        if not s or len(s) != len(r.chunk_ns):
            continue
        ttft.append((r.chunk_ns[0] - s[0]) / 1e6)
        every.extend((c - t) / 1e6 for c, t in zip(r.chunk_ns, s, strict=False))
    return ttft, every


def scenario(name: str, streams: int, ttft_ms: float, itl_ms: float, tokens: int, requests: int, loop: str) -> dict:
    cfg = {"ttft_ms": ttft_ms, "itl_ms": itl_ms, "output_tokens": tokens, "role_chunk": True}
    with spawn_fake_server(cfg) as srv:
        records, elapsed = _run(drive(srv.base_url, streams, requests), loop)
        log = srv.log(wait_idle_s=2)
    ok = [r for r in records if r.ok]
    ttft, every = biases(ok, log)
    chunks = sum(len(r.chunk_ns) for r in ok)
    row = {
        "scenario": name,
        "ok": f"{len(ok)}/{len(records)}",
        "ttft_bias_p50_ms": float(np.percentile(ttft, 50)),
        "ttft_bias_p99_ms": float(np.percentile(ttft, 99)),
        "chunk_bias_p50_ms": float(np.percentile(every, 50)),
        "chunk_bias_p99_ms": float(np.percentile(every, 99)),
        "chunks_per_s": chunks / elapsed,
    }
    print(
        f"{name:<44} ok {row['ok']:>8}  TTFT bias p50 {row['ttft_bias_p50_ms']:.3f} ms  p99 {row['ttft_bias_p99_ms']:.3f} ms  "
        f"chunk bias p50 {row['chunk_bias_p50_ms']:.3f} p99 {row['chunk_bias_p99_ms']:.3f} ms  {row['chunks_per_s']:,.0f} chunks/s",
        flush=True,
    )
    return row


def _run(coro, loop: str):  # type: ignore[no-untyped-def]
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    a = ap.parse_args()
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()} cores={os.cpu_count()} python={sys.version.split()[0]} loop={a.loop}"
    )
    print(f"# vCPU stalls (a busy loop's gaps over 200 us, 3 s per core): {stalls()}")
    scenario("A: 8 streams, TTFT 100 ms, ITL 10 ms, 50 tok", 8, 100, 10, 50, 200, a.loop)
    scenario("B: 32 streams, TTFT 100 ms, ITL 5 ms, 100 tok", 32, 100, 5, 100, 320, a.loop)
    if a.quick:
        return
    print("# highest chunk rate with the bias of every chunk under 1 ms at p50 (ITL 1 ms, 200 tokens)")
    best = None
    for streams in (16, 24, 32, 48, 64, 96):
        row = scenario(f"C: {streams} streams, ITL 1 ms", streams, 20, 1, 200, streams * 2, a.loop)
        if row["chunk_bias_p50_ms"] >= 1.0 or row["ttft_bias_p50_ms"] >= 1.0:
            break
        best = row
    if best is not None:
        print(f"# sustained: {best['chunks_per_s']:,.0f} chunks/s ({best['scenario']})")


if __name__ == "__main__":
    main()
