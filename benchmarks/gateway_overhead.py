"""How much latency does the gateway add, and how many requests a second does one core carry?

Two processes, one core each. The gateway has one core to itself (`--cpu N`), so "one core" means
exactly that: by default the quieter of cores 0 and 1 in a 3 s stall probe (on this kind of VM one
vCPU, often the one taking the device interrupts, is stopped several times as often as the other;
`--gateway-core` chooses). The other core runs the *instrument*: one uvloop process that is both the load generator
and the fake OpenAI backend (a lean streaming server written for this measurement). One process,
not two, because two busy processes on one core take turns in scheduler slices of milliseconds,
and that noise, not the gateway, filled the p99 when the tokenrace fake server and a separate
generator shared the core (they also saturated it at 1000 streaming RPS).

For every request the instrument stamps, with `perf_counter_ns()`: when the client wrote it
(`start`), when the backend had read all of it (`arrival`), when the backend wrote the first token
(or the whole non-streaming body) (`sent`), and when the client read that token (or the last byte
of the body) (`first`). Then

    path latency = (arrival - start) + (first - sent)

is the time spent on the wire and in anything in between, both ways, with the backend's own
thinking time taken out exactly. The same Poisson schedule is run straight at the backend and
through the gateway; "added" is the difference of the two distributions' percentiles. The
gateway's CPU time per request (from /proc) gives the one-core ceiling; a closed loop with many
requests in flight then shows what one core really serves.

`--poll-idle` holds /dev/cpu_dma_latency at 0 while measuring (root only), as cyclictest and the
`latency-performance` tuned profile do: idle vCPUs then poll instead of halting, and a wake-up no
longer costs a VM exit. Rows say which way they were measured.

    python benchmarks/gateway_overhead.py                 # 100, 500, 1000 RPS, 20 s each, ceiling, saturation
    python benchmarks/gateway_overhead.py --quick         # 5 s per rate
    python benchmarks/gateway_overhead.py --rates 1000 --duration 60 --tokens 16 --poll-idle
    python benchmarks/gateway_overhead.py --soak 30       # the long soak: memory over 30 minutes
    python benchmarks/gateway_overhead.py --workers 1,2   # instead: saturation RPS and CPU per request by worker count

`--workers 1,2` starts one gateway per count (`tokenrace gateway --workers N`, not pinned: the
workers go where the kernel puts them), then alternates closed-loop saturation runs between them,
`--rounds` times, streaming and non-streaming. CPU per request is the gateway's CPU time (every
process of it: supervisor, workers, the workers' redis-server) over the requests it served. With
the instrument on the same cores, the RPS figures are context; the CPU per request is the figure
to scale from.

A null proxy (a process on the gateway's core that only copies bytes, one upstream connection per
client connection) runs the same schedule too: it is the cost of any extra process hop on this
machine, so "gateway minus null proxy" is the gateway's own share. A busy-loop probe before the
runs reports how often each vCPU stops for more than 200 us (the host's doing, not ours).
GW_PROBE=script.py runs the gateway as `python script.py gateway ...` (a profiler wrapper).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_stalls, stall_stats  # noqa: E402

KEY = "bench-client-key-0123456789"
GATEWAY_CORE, LOAD_CORE = 0, 1  # set by main() from --gateway-core (default: the quieter core)


# --- the instrument, part 1: a lean OpenAI-compatible backend ------------------------------------------


class Backend(asyncio.Protocol):
    """Chat completions, streamed (chunked SSE, one event per token) or not; keep-alive.

    Every request's body carries `"user": "<n>"`, the generator's request number; `stamps[n]` gets
    the backend's two moments (arrival, first token written).
    """

    ttft_s = 0.02
    itl_s = 0.005
    tokens = 16
    stamps: dict[int, list[int]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        length = content_length(self.buf[:end]) or 0
        if len(self.buf) < end + 4 + length:
            return
        body = orjson.loads(self.buf[end + 4 : end + 4 + length])
        self.buf = self.buf[end + 4 + length :]
        n = int(body.get("user", "-1"))
        stamp = [t, 0]
        self.stamps[n] = stamp
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if body.get("stream"):
            self.loop.call_later(self.ttft_s, self._event, n, 0, usage, stamp)
        else:
            self.loop.call_later(self.ttft_s + self.itl_s * (self.tokens - 1), self._whole, n, stamp)

    def _whole(self, n: int, stamp: list[int]) -> None:
        body = orjson.dumps(
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "w " * self.tokens},
                        "finish_reason": "length",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": self.tokens, "total_tokens": 5 + self.tokens},
            }
        )
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        stamp[1] = time.perf_counter_ns()
        self.transport.write(head + body)

    def _event(self, n: int, i: int, usage: bool, stamp: list[int]) -> None:
        if self.transport.is_closing():
            return
        base = (
            b'{"id":"chatcmpl-%d","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,' % n
        )
        if i < self.tokens:
            role = b'"role":"assistant",' if i == 0 else b""
            out = _chunk(b"data: " + base + b'"delta":{' + role + b'"content":"w "},"finish_reason":null}]}\n\n')
            if i == 0:
                out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + out
                stamp[1] = time.perf_counter_ns()
            self.transport.write(out)
            self.loop.call_later(self.itl_s, self._event, n, i + 1, usage, stamp)
            return
        out = _chunk(b"data: " + base + b'"delta":{},"finish_reason":"length"}]}\n\n')
        if usage:
            out += _chunk(
                b'data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
                b'"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}\n\n'
                % (n, self.tokens, 5 + self.tokens)
            )
        self.transport.write(out + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


def content_length(head: bytes) -> int | None:
    """The Content-Length of an HTTP head (bytes before the blank line), None when absent."""
    head = head.lower()
    at = head.find(b"content-length:")
    if at < 0:
        return None
    stop = head.find(b"\r\n", at)
    return int(head[at + 15 : stop if stop > 0 else None])


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


# --- the instrument, part 2: the load generator --------------------------------------------------------


class Probe(asyncio.Protocol):
    """One keep-alive client connection, one request at a time; stamps the first token's arrival."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, payload: bytes) -> asyncio.Future[None]:
        self.head, self.status, self.length, self.received, self.tail = b"", 0, -1, 0, b""
        self.first_ns: int | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(payload)
        return self.done

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        if self.status == 0:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.status = int(self.head[9:12])
            length = content_length(self.head[:end])
            if length is not None:
                self.length = length
            data = self.head[end + 4 :]
        if self.length >= 0:  # a non-streaming body (or an error): done when all of it is here
            self.received += len(data)
            if self.received >= self.length:
                self.first_ns = t if self.status == 200 else None
                self._end()
            return
        if self.first_ns is None and data.find(b'"content":"w') >= 0:
            self.first_ns = t
        self.tail = (self.tail + data)[-5:]  # the terminating chunk may straddle two reads
        if self.tail == b"0\r\n\r\n":
            self._end()

    def _end(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if hasattr(self, "done") and not self.done.done():
            self.done.set_result(None)


class Generator:
    def __init__(self) -> None:
        self.counter = 0
        self.pools: dict[tuple[str, bool], list[Probe]] = {}

    async def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        host, port = cmd["url"].split("//")[1].split(":")
        stream = bool(cmd["stream"])
        idle = self.pools.setdefault((cmd["url"], stream), [])
        loop = asyncio.get_running_loop()
        prefix = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\n"
        ).encode()
        records: list[tuple[int, int, int | None, int]] = []  # n, start, first, status

        async def one() -> None:
            self.counter += 1
            n = self.counter
            body = orjson.dumps(
                {
                    "model": "m",
                    "messages": [{"role": "user", "content": "hello"}],
                    "stream": stream,
                    "max_tokens": Backend.tokens,
                    "user": str(n),
                }
            )
            probe = idle.pop() if idle else None
            if probe is None or probe.transport is None:
                _, probe = await loop.create_connection(lambda: Probe(stream), host, int(port))
            start = time.perf_counter_ns()
            await probe.send(prefix + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            records.append((n, start, probe.first_ns, probe.status))
            if probe.transport is not None:
                idle.append(probe)

        warm = max(20, min(400, int(cmd["rate"] * 0.3))) if cmd["rate"] else cmd["concurrency"]
        await asyncio.gather(*(one() for _ in range(warm)))  # connections (here and upstream) opened before measuring
        records.clear()
        Backend.stamps.clear()
        t0 = time.monotonic()
        window = [time.perf_counter_ns(), 0]
        if cmd["concurrency"]:
            await self._closed(one, cmd["concurrency"], cmd["duration"])
        else:
            await self._open(one, cmd["rate"], cmd["duration"], cmd.get("seed", 0))
        elapsed = time.monotonic() - t0
        window[1] = time.perf_counter_ns()
        return {**self._result(records, elapsed), "window_ns": window}

    @staticmethod
    async def _open(one: Any, rate: float, duration: float, seed: int) -> None:
        """Poisson arrivals; the schedule never waits for the server."""
        rng = random.Random(seed)
        tasks = []
        next_ns = time.perf_counter_ns()
        end_ns = next_ns + int(duration * 1e9)
        while next_ns < end_ns:
            delay = (next_ns - time.perf_counter_ns()) / 1e9
            if delay > 0.0012:  # uvloop's timers have millisecond resolution: sleep most of the gap, yield the rest
                await asyncio.sleep(delay - 0.0012)
            while time.perf_counter_ns() < next_ns:
                await asyncio.sleep(0)
            tasks.append(asyncio.ensure_future(one()))
            next_ns += int(rng.expovariate(rate) * 1e9)
        await asyncio.gather(*tasks)

    @staticmethod
    async def _closed(one: Any, concurrency: int, duration: float) -> None:
        end = time.monotonic() + duration

        async def worker() -> None:
            while time.monotonic() < end:
                await one()

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    @staticmethod
    def _result(records: list[tuple[int, int, int | None, int]], elapsed: float) -> dict[str, Any]:
        path, failed = [], 0
        for n, start, first, status in records:
            stamp = Backend.stamps.get(n)
            if status != 200 or first is None or stamp is None or not stamp[1]:
                failed += 1
                continue
            arrival, sent = stamp
            path.append(((arrival - start) + (first - sent)) / 1e6)
        return {"n": len(records), "failed": failed, "elapsed_s": elapsed, "path_ms": path}


async def instrument_main(args: argparse.Namespace) -> None:
    """Serve as the backend; run the generator for each command read from stdin (one JSON line)."""
    Backend.ttft_s, Backend.itl_s, Backend.tokens = args.ttft_ms / 1000, args.itl_ms / 1000, args.tokens
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Backend, "127.0.0.1", 0, backlog=4096)
    print(f"LISTEN {server.sockets[0].getsockname()[1]}", flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    generator = Generator()
    while line := await reader.readline():
        result = await generator.run(json.loads(line))
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


class Instrument:
    """The instrument process, pinned to its core, driven over a pipe."""

    def __init__(self, args: argparse.Namespace) -> None:
        argv = [
            sys.executable,
            __file__,
            "--instrument",
            "--load-core",
            str(LOAD_CORE),
            "--tokens",
            str(args.tokens),
            "--ttft-ms",
            str(args.ttft_ms),
            "--itl-ms",
            str(args.itl_ms),
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("LISTEN "):
            raise RuntimeError(f"instrument did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        self.pid = self.proc.pid

    def run(self, url: str, stream: bool, rate: float = 0, duration: float = 5, concurrency: int = 0) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        cmd = {"url": url, "stream": stream, "rate": rate, "duration": duration, "concurrency": concurrency}
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        result: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return result

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def instrument_process(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {args.load_core})
    gc.collect()
    gc.freeze()
    uvloop.run(instrument_main(args))


# --- the null proxy: the least any proxy can cost on this machine ------------------------------------------


class _Pipe(asyncio.Protocol):
    """One side of a null-proxy connection: copies what it reads to its peer, unread."""

    def __init__(self, upstream_port: int = 0, peer: asyncio.Transport | None = None) -> None:
        self.upstream_port = upstream_port
        self.peer = peer
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        if self.upstream_port:  # a client side: open its own upstream connection
            asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(lambda: _Pipe(peer=self.transport), "127.0.0.1", self.upstream_port)
        self.peer = up.transport
        for data in self.pending:
            self.peer.write(data)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.pending.append(data)
        else:
            self.peer.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()


async def null_proxy_main(upstream_port: int) -> None:
    """Each client connection gets its own upstream connection; bytes are copied both ways, unread."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Pipe(upstream_port), "127.0.0.1", 0, backlog=4096)
    print(f"READY http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def null_proxy_process(upstream_port: int, core: int) -> None:
    os.sched_setaffinity(0, {core})
    uvloop.run(null_proxy_main(upstream_port))


# --- orchestration ----------------------------------------------------------------------------------------


def start_gateway(backend_url: str, workdir: Path, workers: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """The gateway on GATEWAY_CORE; with `workers`, that many worker processes, not pinned."""
    config = workdir / f"gateway-{workers}.yaml"
    config.write_text(
        f"listen: {{host: 127.0.0.1, port: 0}}\n"
        f"backends:\n  fake: {{url: '{backend_url}/v1', max_in_flight: 4096}}\n"
        f"routes:\n  - model: m\n    backends: [fake]\n"
        f"auth:\n  keys: [{{name: bench, key_env: BENCH_KEY}}]\n"
        f"log: {{level: warning}}\n"
    )
    runner = os.environ["GW_PROBE"].split() if os.environ.get("GW_PROBE") else ["-m", "tokenrace"]
    env = {**os.environ, "BENCH_KEY": KEY, "PYTHONPATH": str(ROOT / "src")}
    where = ["--workers", str(workers), "--force"] if workers is not None else ["--cpu", str(GATEWAY_CORE)]
    return spawn_ready([sys.executable, *runner, "gateway", "--config", str(config), *where], env)


def start_null_proxy(backend_url: str) -> tuple[subprocess.Popen[bytes], str]:
    return spawn_ready(
        [sys.executable, __file__, "--null-proxy", backend_url.rsplit(":", 1)[1], "--gateway-core", str(GATEWAY_CORE)]
    )


def spawn_ready(argv: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server that prints `READY <url>` on stdout; return it and the URL."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    while line and not line.startswith("READY "):  # a wrapper (GW_PROBE, e.g. a profiler) may print first
        line = proc.stdout.readline().decode().strip()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"{argv[1:4]} did not start: {line!r}")
    return proc, line.removeprefix("READY ")


def own_overhead(url: str) -> dict[tuple[str, str], float]:
    """The gateway's tokenrace_gateway_overhead_seconds histogram: (phase, "sum"|"count") -> value."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("tokenrace_gateway_overhead_seconds_sum") or line.startswith(
            "tokenrace_gateway_overhead_seconds_count"
        ):
            name, value = line.rsplit(" ", 1)
            out[(name.split('phase="')[1].split('"')[0], name.split("{")[0].rsplit("_", 1)[1])] = float(value)
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, _nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


class Others:
    """CPU used by everything but the gateway and the instrument since construction, in cores."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.t0 = time.monotonic()
        self.busy0 = machine_busy_s()
        self.ours0 = self._ours()

    def _ours(self) -> float:
        t = os.times()
        return sum(cpu_seconds(p) for p in self.pids) + t.user + t.system

    def cores(self) -> float:
        elapsed = max(1e-9, time.monotonic() - self.t0)
        return max(0.0, (machine_busy_s() - self.busy0) - (self._ours() - self.ours0)) / elapsed


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (a supervisor, its workers, their redis-server)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue  # it exited meanwhile
    return out


def tree_cpu_seconds(pid: int) -> float:
    total = 0.0
    for p in process_tree(pid):
        try:
            total += cpu_seconds(p)
        except OSError:
            continue
    return total


def scaling(args: argparse.Namespace, inst: Instrument, gateways: dict[int, tuple[str, int]]) -> list[dict[str, Any]]:
    """Closed-loop saturation through each worker count in turn, `--rounds` times: RPS served and
    the gateway's CPU per request (all its processes)."""
    duration = 5.0 if args.quick else min(args.duration, 10.0)
    counts = sorted(gateways)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average before {os.getloadavg()[0]:.2f}; instrument on core {LOAD_CORE}, gateways not pinned; "
        f"{args.saturate} in flight, {duration:g} s per run, {args.rounds} rounds alternating workers {counts}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for n in counts if round_ % 2 == 0 else counts[::-1]:
            url, pid = gateways[n]
            for stream in (True, False):
                cpu0 = tree_cpu_seconds(pid)
                result = inst.run(url, stream, duration=duration, concurrency=args.saturate)
                ok = result["n"] - result["failed"]
                cpu = tree_cpu_seconds(pid) - cpu0
                row = {
                    "workers": n,
                    "stream": stream,
                    "round": round_,
                    "rps": ok / result["elapsed_s"],
                    "failed": result["failed"],
                    "cpu_us_per_request": cpu / ok * 1e6 if ok else None,
                    "load_average": os.getloadavg()[0],
                }
                rows.append(row)
                print(
                    f"round {round_} workers={n} {'streaming' if stream else 'non-streaming'}: {row['rps']:.0f} RPS, "
                    f"{fmt(row['cpu_us_per_request'])} us CPU/request, failed {row['failed']}, "
                    f"load average {row['load_average']:.2f}",
                    flush=True,
                )
    for stream in (True, False):
        for n in counts:
            mine = [r for r in rows if r["workers"] == n and r["stream"] == stream]
            rps = float(np.median([r["rps"] for r in mine]))
            cpu = float(np.median([r["cpu_us_per_request"] for r in mine if r["cpu_us_per_request"] is not None]))
            print(
                f"workers={n} {'streaming' if stream else 'non-streaming'}: median {rps:.0f} RPS, {cpu:.0f} us CPU/request "
                f"(so {1e6 / cpu:.0f} RPS per core the gateway has)",
                flush=True,
            )
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return rows


def wait_quiet(limit_s: float, pids: list[int]) -> None:
    """Wait (up to limit_s) until other processes use under 0.1 core for 3 s in a row."""
    deadline = time.monotonic() + limit_s
    calm = 0
    while time.monotonic() < deadline and calm < 3:
        probe = Others(pids)
        time.sleep(1.0)
        calm = calm + 1 if probe.cores() < 0.1 else 0


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


Targets = dict[str, tuple[str, int | None]]  # mode -> (base URL, pid of the proxy or None)


ROUND_S = 2.5


def measure(inst: Instrument, targets: Targets, rate: float, duration: float, stream: bool) -> dict[str, Any]:
    """One rate: the same Poisson schedule straight at the backend, through the null proxy and through
    the gateway, in interleaved rounds of ROUND_S (the order rotating) so that the machine's drift
    touches every mode alike; the rounds' latencies are pooled."""
    pids = our_pids(inst, targets)
    modes = list(targets)
    acc: dict[str, dict[str, Any]] = {
        m: {
            "path": [],
            "n": 0,
            "failed": 0,
            "elapsed": 0.0,
            "cpu": 0.0,
            "load": 0.0,
            "others": 0.0,
            "own0": {},
            "own1": {},
        }
        for m in modes
    }
    rounds = max(1, round(duration / ROUND_S))
    for r in range(rounds):
        for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
            url, pid = targets[mode]
            a = acc[mode]
            others = Others(pids)
            cpu0, load0 = cpu_seconds(pid) if pid else 0.0, cpu_seconds(inst.pid)
            own0 = own_overhead(url) if mode == "gateway" else {}
            result = inst.run(url, stream, rate=rate, duration=duration / rounds)
            if mode == "gateway":
                own1 = own_overhead(url)
                for key, value in own1.items():
                    a["own1"][key] = a["own1"].get(key, 0.0) + value - own0.get(key, 0.0)
            a["path"] += result["path_ms"]
            a["n"] += result["n"]
            a["failed"] += result["failed"]
            a["elapsed"] += result["elapsed_s"]
            a["cpu"] += (cpu_seconds(pid) - cpu0) if pid else 0.0  # includes the warm-up requests, a few percent
            a["load"] += cpu_seconds(inst.pid) - load0
            a["others"] = max(a["others"], others.cores())
    row: dict[str, Any] = {"rate": rate, "stream": stream, "rounds": rounds}
    for mode, a in acc.items():
        lat, elapsed = a["path"], a["elapsed"]
        row[mode] = {
            "n": a["n"],
            "failed": a["failed"],
            "achieved_rps": a["n"] / elapsed,
            "p50": pct(lat, 50),
            "p90": pct(lat, 90),
            "p99": pct(lat, 99),
            "p999": pct(lat, 99.9),
            "max": max(lat) if lat else None,
            "others_cores": a["others"],
            "instrument_busy": a["load"] / elapsed,
            "proxy_cpu_us_per_request": a["cpu"] / max(1, a["n"]) * 1e6 if targets[mode][1] else None,
            "proxy_busy": a["cpu"] / elapsed if targets[mode][1] else None,
        }
        for phase in {k[0] for k in a["own1"]}:  # the gateway's own histogram: mean time in each phase
            n = a["own1"][(phase, "count")]
            row[mode][f"own_{phase}_us"] = a["own1"][(phase, "sum")] / n * 1e6 if n else None
    for base in ("direct", "null"):
        if base in row and "gateway" in row:
            for q in ("p50", "p90", "p99"):
                g, d = row["gateway"][q], row[base][q]
                row[f"added_over_{base}_{q}_ms"] = g - d if g is not None and d is not None else None
    return row


def cleanest(
    args: argparse.Namespace, inst: Instrument, targets: Targets, rate: float, duration: float, stream: bool
) -> dict[str, Any]:
    """Measure a row; while other processes took more than --max-others cores meanwhile, wait and
    measure again (up to --tries times); keep the least disturbed row."""
    rows = []
    pids = our_pids(inst, targets)
    for _ in range(max(1, args.tries)):
        if args.wait_quiet:
            wait_quiet(args.wait_quiet, pids)
        row = measure(inst, targets, rate, duration, stream)
        rows.append(row)
        if disturbance(row) <= args.max_others:
            break
        print(f"  (disturbed: other processes used {disturbance(row):.2f} cores; measuring again)", flush=True)
    return min(rows, key=disturbance)


def our_pids(inst: Instrument, targets: Targets) -> list[int]:
    return [inst.pid] + [pid for _, pid in targets.values() if pid is not None]


def disturbance(row: dict[str, Any]) -> float:
    worst: float = max(v["others_cores"] for v in row.values() if isinstance(v, dict))
    return worst


def show(row: dict[str, Any]) -> None:
    kind = "stream TTFT" if row["stream"] else "non-stream "
    paths = " | ".join(
        f"{mode} {fmt(v['p50'])}/{fmt(v['p90'])}/{fmt(v['p99'])}/{fmt(v['p999'])}"
        for mode, v in row.items()
        if isinstance(v, dict)
    )
    print(f"{row['rate']:>6.0f} RPS {kind} path p50/p90/p99/p99.9 ms: {paths}", flush=True)
    g = row.get("gateway")
    if g is None:
        return
    added = " ; ".join(
        f"over {base} p50 {fmt(row[f'added_over_{base}_p50_ms'])}, p90 {fmt(row[f'added_over_{base}_p90_ms'])}, p99 {fmt(row[f'added_over_{base}_p99_ms'])} ms"
        for base in ("direct", "null")
        if f"added_over_{base}_p99_ms" in row
    )
    failed = "+".join(str(v["failed"]) for v in row.values() if isinstance(v, dict))
    print(
        f"{'':>22}gateway adds {added} | achieved {g['achieved_rps']:.0f} RPS, failed {failed} | gateway CPU {g['proxy_cpu_us_per_request']:.0f} us/req "
        f"({g['proxy_busy'] * 100:.0f}% of its core; own phases {own(g)}), instrument {g['instrument_busy'] * 100:.0f}% | others {disturbance(row):.2f} cores",
        flush=True,
    )


def own(g: dict[str, Any]) -> str:
    return (
        ", ".join(f"{k[4:-3]} {v:.0f}" for k, v in sorted(g.items()) if k.startswith("own_") and v is not None) + " us"
    )


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def saturate(
    inst: Instrument, gateway_url: str, pid: int, concurrency: int, duration: float, stream: bool
) -> dict[str, Any]:
    """Closed loop with many requests in flight: the most the gateway served, and what was the limit."""
    cpu0, load0, t0 = cpu_seconds(pid), cpu_seconds(inst.pid), time.monotonic()
    result = inst.run(gateway_url, stream, duration=duration, concurrency=concurrency)
    wall = time.monotonic() - t0  # the warm-up's CPU is in the /proc figures, so its time is in the divisor too
    elapsed = result["elapsed_s"]
    busy, load = (cpu_seconds(pid) - cpu0) / wall, (cpu_seconds(inst.pid) - load0) / wall
    ok = result["n"] - result["failed"]
    kind = "streaming" if stream else "non-streaming"
    limit = (
        "the gateway's core was the limit"
        if busy > 0.9
        else "the instrument's core saturated first"
        if load > 0.9
        else "neither core was full"
    )
    print(
        f"saturation, {kind}, {concurrency} in flight: {ok / elapsed:.0f} RPS served, gateway core {busy * 100:.0f}% busy, "
        f"instrument core {load * 100:.0f}% ({limit}); path p50/p99 {fmt(pct(result['path_ms'], 50))}/{fmt(pct(result['path_ms'], 99))} ms",
        flush=True,
    )
    return {
        "saturate": concurrency,
        "stream": stream,
        "rps": ok / elapsed,
        "gateway_busy": busy,
        "instrument_busy": load,
    }


def overhead(args: argparse.Namespace, inst: Instrument, targets: Targets) -> list[dict[str, Any]]:
    duration = 5.0 if args.quick else args.duration
    rates = [float(r) for r in args.rates.split(",")]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average before {os.getloadavg()[0]:.2f}"
    )
    print(
        f"vCPU stalls (a busy loop's gaps over 200 us, 3 s per core, before measuring): {describe_stalls(args.stalls)}"
    )
    print(
        f"conditions: gateway and null proxy pinned to core {GATEWAY_CORE}; instrument (backend + generator, one uvloop process) on core {LOAD_CORE}; "
        f"loopback; Poisson arrivals; {args.tokens} output tokens/request (one SSE event each), backend TTFT {args.ttft_ms:g} ms, "
        f"ITL {args.itl_ms:g} ms; {duration:g} s per rate and mode; idle vCPUs {'poll (cpu_dma_latency 0)' if args.poll_idle else 'halt (default)'}",
        flush=True,
    )
    rows = []
    for stream in (True, False):
        for rate in rates:
            row = cleanest(args, inst, targets, rate, duration, stream)
            row["poll_idle"] = args.poll_idle
            show(row)
            rows.append(row)
    url, pid = targets["gateway"]
    assert pid is not None
    for stream in (True, False):
        best = max((r for r in rows if r["stream"] == stream), key=lambda r: r["rate"])
        kind = "streaming" if stream else "non-streaming"
        us = best["gateway"]["proxy_cpu_us_per_request"]
        print(
            f"one-core ceiling, {kind}: {1e6 / us:.0f} RPS (1 / {us:.0f} us of gateway CPU per request at {best['rate']:.0f} RPS)",
            flush=True,
        )
    for line in verdict(rows):
        print(line, flush=True)
    if args.saturate:
        for stream in (True, False):
            rows.append(saturate(inst, url, pid, args.saturate, duration, stream))
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return rows


TARGET_RATE, TARGET_P99_MS = 1000, 1.0  # the gateway's budget: at most 1 ms added at p99 at 1000 RPS on one core


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    """The target, met or not, with the null proxy's own p99 beside it (the floor of any proxy hop here)."""
    lines = []
    for row in rows:
        if row["rate"] != TARGET_RATE:
            continue
        added = row.get("added_over_direct_p99_ms")
        if added is None:
            continue
        kind = "streaming TTFT" if row["stream"] else "non-streaming"
        null, direct = row.get("null"), row["direct"]
        floor = null["p99"] - direct["p99"] if null and null["p99"] is not None and direct["p99"] is not None else None
        met = "MET" if added <= TARGET_P99_MS else "NOT MET"
        beside = f"; the null proxy alone adds {floor:+.3f} ms at p99 here" if floor is not None else ""
        lines.append(
            f"target (<= {TARGET_P99_MS:g} ms added at p99 at {TARGET_RATE} RPS), {kind}: {met}, gateway adds {added:+.3f} ms{beside}"
        )
    return lines


def choose_cores(args: argparse.Namespace) -> None:
    """The gateway gets the quieter of cores 0 and 1 unless told: on this kind of VM one vCPU (often
    the one that takes the device interrupts) is stopped several times as often as the other, and
    the gateway, whose requests cross cores, feels that where the in-process instrument does not."""
    global GATEWAY_CORE, LOAD_CORE
    args.stalls = stall_stats([0, 1])
    if args.gateway_core is None:
        args.gateway_core = min((0, 1), key=lambda c: args.stalls[c]["lost_pct"])
    if args.load_core is None:
        args.load_core = 1 if args.gateway_core == 0 else 0
    GATEWAY_CORE, LOAD_CORE = args.gateway_core, args.load_core


class poll_idle:
    """Hold /dev/cpu_dma_latency at 0 (idle CPUs poll rather than halt) while the block runs."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.fd: int | None = None

    def __enter__(self) -> poll_idle:
        if self.on:
            try:
                self.fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
                os.write(self.fd, struct.pack("i", 0))
            except OSError as exc:
                sys.exit(f"--poll-idle: cannot hold /dev/cpu_dma_latency ({exc.strerror}); it needs root")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def soak(inst: Instrument, gateway_url: str, pid: int, seconds: float) -> None:
    """300 RPS for `seconds`, streaming and non-streaming in turn (10 s each); the gateway's resident
    memory every 10 s, and its slope after the first third."""
    print(
        f"soak: {seconds / 60:g} min at 300 RPS through the gateway (pid {pid}), streaming and non-streaming in turn",
        flush=True,
    )
    samples: list[tuple[float, float]] = []
    start = time.monotonic()
    stream = True
    while time.monotonic() - start < seconds:
        inst.run(gateway_url, stream, rate=300, duration=10)
        stream = not stream
        samples.append((time.monotonic() - start, rss_mib(pid)))
        print(f"  t={samples[-1][0]:6.0f} s  RSS {samples[-1][1]:6.1f} MiB", flush=True)
    if len(samples) >= 4:
        tail = samples[len(samples) // 3 :]
        slope = np.polyfit([t for t, _ in tail], [r for _, r in tail], 1)[0] * 60
        print(
            f"soak: RSS {samples[0][1]:.1f} -> {samples[-1][1]:.1f} MiB; slope after warm-up {slope:+.3f} MiB/min",
            flush=True,
        )


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instrument", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--null-proxy", type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument(
        "--gateway-core",
        type=int,
        help="core for the gateway and the null proxy (default: the one that lost less time to stalls in a 3 s probe)",
    )
    p.add_argument("--load-core", type=int, help="core for the instrument (default: the other one)")
    p.add_argument(
        "--no-null",
        action="store_true",
        help="skip the null proxy (a process that only copies bytes: the cost of any proxy hop here)",
    )
    p.add_argument("--rates", default="100,500,1000")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per rate and mode")
    p.add_argument("--tokens", type=int, default=16, help="output tokens per request (one SSE event each)")
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--quick", action="store_true", help="5 s per rate and mode")
    p.add_argument(
        "--saturate",
        type=int,
        default=1024,
        metavar="N",
        help="closed loop with N in flight to find the most RPS (0: skip)",
    )
    p.add_argument("--poll-idle", action="store_true", help="hold /dev/cpu_dma_latency at 0 while measuring (root)")
    p.add_argument(
        "--soak",
        type=float,
        metavar="MINUTES",
        help="instead: streaming traffic for this long, printing the gateway's memory",
    )
    p.add_argument("--tries", type=int, default=3, help="measure a disturbed row again, up to this many times in all")
    p.add_argument(
        "--max-others",
        type=float,
        default=0.1,
        metavar="CORES",
        help="a row is disturbed when other processes used more",
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=120.0,
        metavar="S",
        help="before each row, wait up to this long for the machine to be quiet",
    )
    p.add_argument(
        "--workers",
        help="instead: saturation RPS and CPU per request for these worker counts (e.g. 1,2), alternated",
    )
    p.add_argument("--rounds", type=int, default=3, help="--workers: runs per count, alternated")
    p.add_argument("--json", type=Path, help="also write the rows here")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.instrument:
        instrument_process(args)
        return
    if args.null_proxy:
        null_proxy_process(args.null_proxy, args.gateway_core)
        return
    if (os.cpu_count() or 0) < 2:
        sys.exit("needs 2 cores: one for the gateway alone, one for the instrument")
    choose_cores(args)
    inst = Instrument(args)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp, poll_idle(args.poll_idle):
            if args.workers:
                gateways = {}
                for n in sorted({int(x) for x in args.workers.split(",")}):
                    proc, url = start_gateway(inst.url, Path(tmp), workers=n)
                    procs.append(proc)
                    gateways[n] = (url, proc.pid)
                rows = scaling(args, inst, gateways)
                if args.json is not None:
                    args.json.write_text(json.dumps(rows, indent=2))
                return
            gateway, gateway_url = start_gateway(inst.url, Path(tmp))
            procs.append(gateway)
            if args.soak is not None:
                soak(inst, gateway_url, gateway.pid, args.soak * 60)
                return
            targets: Targets = {"direct": (inst.url, None)}
            if not args.no_null:
                null, null_url = start_null_proxy(inst.url)
                procs.append(null)
                targets["null"] = (null_url, null.pid)
            targets["gateway"] = (gateway_url, gateway.pid)
            rows = overhead(args, inst, targets)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
        inst.close()
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
