"""Does spreading the sends over worker processes raise the load one client can measure exactly?

For each number of workers, the same closed-loop load runs against the fake server in a process of
its own (it logs `perf_counter_ns()` just before writing each SSE event; CLOCK_MONOTONIC is one
clock for every process of the machine). 1 worker is the single-process path (the runner calls the
client itself); N > 1 is `--workers N` (one scheduler in this process, sends from N processes).
Printed per row: achieved chunks/s, and the TTFT bias and per-chunk bias (client arrival stamp
minus server send stamp), p50/p99, in ms.

    python benchmarks/scale.py                    # 32 and 64 streams, 1, 2 and 4 workers
    python benchmarks/scale.py --workers 1 2 --streams 32

A 2-vCPU machine runs the server and the client on the same two cores: more sending processes
than free cores cannot help there, and the figures show the cost of the hand-over instead.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

from tokenrace import aio
from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.calibration import record_bias, server_view
from tokenrace.load.prompts import single
from tokenrace.load.runner import Load, Runner
from tokenrace.load.worker_core import WorkerConfig
from tokenrace.load.workers import Dispatcher, ProcessPool
from tokenrace.model.records import RequestRecord

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import stalls


async def _nothing(rec: RequestRecord, prompt: Prompt) -> None:
    return None


async def drive(base_url: str, streams: int, requests: int, workers: int) -> tuple[list[RequestRecord], float]:
    """The load's records and its wall time (s), from one process or from `workers` processes."""
    opts = RequestOptions(max_tokens=None)
    load = Load(concurrency=streams, requests=requests, cold=False)
    if workers == 1:
        async with OpenAIClient(base_url, "fake-model", options=opts, max_connections=streams) as client:
            runner = Runner(client.send, single("hello"), load, _nothing)
            t = time.perf_counter()
            await runner.run()
            return runner.records, time.perf_counter() - t
    pool = ProcessPool(WorkerConfig(base_url, "fake-model", options=opts, max_connections=streams), workers)
    await pool.start()
    try:
        dispatcher = Dispatcher(pool)
        load.keep_awake = False  # the workers keep their own loops awake
        runner = Runner(dispatcher.send, single("hello"), load, _nothing, lead_ns=dispatcher.lead_ns)
        t = time.perf_counter()
        await runner.run()
        return runner.records, time.perf_counter() - t
    finally:
        await pool.close()


def row(streams: int, itl_ms: float, tokens: int, workers: int, rounds: int) -> None:
    cfg = {"ttft_ms": 50, "itl_ms": itl_ms, "output_tokens": tokens, "role_chunk": True}
    with spawn_fake_server(cfg) as srv:
        records, elapsed = aio.run(drive(srv.base_url, streams, streams * rounds, workers))
        log = srv.log(wait_idle_s=2)
    ok = [r for r in records if r.ok]
    bias = record_bias(ok, server_view(log))  # the same per-event differences `tokenrace calibrate` reports
    ttft, every = bias.ttft, bias.chunk
    chunks = sum(len(r.chunk_ns) for r in ok)
    p = lambda xs, q: float(np.percentile(xs, q)) if xs else float("nan")
    print(
        f"{streams:>3} streams ITL {itl_ms:>3} ms  workers {workers}  ok {len(ok):>4}/{len(records):<4} "
        f"{chunks / elapsed:>8,.0f} chunks/s  TTFT bias p50 {p(ttft, 50):6.3f} p99 {p(ttft, 99):6.3f} ms  "
        f"chunk bias p50 {p(every, 50):6.3f} p99 {p(every, 99):6.3f} ms",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--streams", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--itl-ms", type=float, default=2.0)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3, help="requests per stream")
    a = ap.parse_args()
    print(f"# {platform.node()} {platform.machine()} cores={os.cpu_count()} python={sys.version.split()[0]}")
    print(f"# vCPU stalls (a busy loop's gaps over 200 us, 3 s per core): {stalls()}")
    for streams in a.streams:
        for workers in a.workers:
            row(streams, a.itl_ms, a.tokens, workers, a.rounds)


if __name__ == "__main__":
    main()
