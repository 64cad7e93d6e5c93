"""How exactly does tokenrace's client time what the server sent, above the floor of any client here?

The fake server runs in a process of its own and logs `perf_counter_ns()` when each request's bytes
came off its socket and just before it wrote each SSE event (CLOCK_MONOTONIC is shared between
processes on Linux). Two clients drive it in turn, in the same run, against the same server:

- the floor (benchmarks/raw_floor.py): non-blocking sockets and one selector, no HTTP library, in a
  process of its own: the least any client on this machine can see;
- tokenrace's client and runner, in this process, as `bench` runs them (records written as each
  request ends, live progress drawn, the garbage collector quieted), and in variants that each take
  one of those away (or add the opt-in keep-awake spin), to measure what each costs.

Per request, TTFT bias = the arrival stamp of the first content chunk - the server's send stamp of
it (the send, TTFT's other end, is stamped microseconds before the `send()` call that hands the
request to the kernel; what follows before the server reads it is the server's own time, shown apart
as the request leg); per content chunk, chunk bias = arrival stamp - send stamp; per gap, ITL bias =
the client's gap - the server's. Every tokenrace figure is printed as its excess over the floor's
figure from the same run (tokenrace p50 - floor p50, p99 - p99), with a verdict per target:

- A: 8 streams, TTFT 100 ms, ITL 10 ms: TTFT excess <= 0.15 ms p50, <= 1 ms p99;
- B: 32 streams, TTFT 100 ms, ITL 5 ms (~6k chunks/s): TTFT excess <= 0.5 ms p50, <= 2 ms p99.

    python benchmarks/client_accuracy.py            # every variant, 2 rounds (a few minutes)
    python benchmarks/client_accuracy.py --quick    # the floor and `bench` as it runs, 1 round (~30 s)

Rounds alternate the clients, so that a noisy neighbour lands on all of them alike. The server runs
alone on the last core and the clients on the others (`--no-pin` lets the OS place them). Run it on
a quiet machine: the load and vCPU stall lines at the top say how quiet it was.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from tokenrace import aio
from tokenrace.fakes.fake_server import FakeServerProcess, spawn_fake_server
from tokenrace.load import runner as runner_module
from tokenrace.load.calibration import Bias, StepPlan, bias_of, drive, percentiles, server_view
from tokenrace.load.progress import LiveProgress
from tokenrace.model.records import RequestRecord
from tokenrace.model.stats import Percentiles
from tokenrace.runs.store import RunStore

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from machine import stalls  # noqa: E402


@dataclass(frozen=True)
class Scenario:
    name: str
    streams: int
    ttft_ms: float
    itl_ms: float
    tokens: int
    target_p50_ms: float
    target_p99_ms: float

    @property
    def fake(self) -> dict[str, Any]:
        return {
            "ttft_ms": self.ttft_ms,
            "itl_ms": self.itl_ms,
            "output_tokens": self.tokens,
            "role_chunk": True,
            "spin_ms": SPIN_MS,
        }


SPIN_MS = 0.0  # see --spin
PIN: dict[str, set[int] | None] = {"server": None, "clients": None}

SCENARIOS = (
    Scenario("A: 8 streams, TTFT 100 ms, ITL 10 ms", 8, 100, 10, 50, 0.15, 1.0),
    Scenario("B: 32 streams, TTFT 100 ms, ITL 5 ms", 32, 100, 5, 100, 0.5, 2.0),
)


@dataclass(frozen=True)
class Variant:
    """What of `bench`'s own work runs beside the measurement."""

    name: str
    records: bool = True  # each record serialized and written (flushed) as its request ends
    progress: bool = True  # the live progress bar, drawn to a terminal
    gc: str = "quiet"  # quiet (the runner's), default (Python's thresholds), off
    spin: bool = False  # --keep-awake: the event loop polls (a busy core)


BENCH = Variant("bench as it runs")
VARIANTS = (
    BENCH,
    Variant("without progress", progress=False),
    Variant("without record writes", records=False),
    Variant("with the keep-awake spin", spin=True),
    Variant("with Python's default GC", gc="default"),
    Variant("with GC off", gc="off"),
)


# --- the floor ----------------------------------------------------------------------------------


def floor(srv: FakeServerProcess, sc: Scenario, rounds: int) -> Bias:
    argv = [sys.executable, os.path.join(HERE, "raw_floor.py"), "--url", srv.url, "--streams", str(sc.streams)]
    argv += ["--requests", str(sc.streams * rounds), "--warmup", str(sc.streams), "--fake", json.dumps(sc.fake)]
    srv.reset()
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    log = {e["session_id"]: e for e in srv.log(wait_idle_s=2)}
    bias = Bias()
    for line in out.splitlines():
        row = json.loads(line)
        e = log[row["session"]]
        content = [i for i, c in enumerate(e["chunks"]) if c["kind"] in ("content", "reasoning")]
        if len(row["events_ns"]) != len(e["chunks"]):
            continue
        sent = [e["chunks"][i]["t_ns"] for i in content]
        arrivals = [row["events_ns"][i] for i in content]
        bias_of(row["start_ns"], arrivals, e.get("received_ns") or e["arrival_ns"], sent, bias)
    return bias


# --- tokenrace ------------------------------------------------------------------------------------


@contextlib.contextmanager
def conditions(v: Variant) -> Iterator[None]:
    """Patch the runner's GC for a variant (the runner always quiets it)."""
    saved = runner_module.quiet_gc
    if v.gc != "quiet":
        runner_module.quiet_gc = contextlib.nullcontext  # type: ignore[assignment]
    if v.gc == "off":
        gc.disable()
    try:
        yield
    finally:
        runner_module.quiet_gc = saved
        gc.enable()


def progress_on_a_terminal(total: int) -> LiveProgress:
    """The live progress as a terminal would see it, drawn to /dev/null."""
    return LiveProgress(total, console=Console(file=open(os.devnull, "w"), force_terminal=True))


class Costs:
    """CPU time (`thread_time`, so that the VM's stalls do not count) of bench's own work on the
    event loop's thread: each record written, each progress call (and redraw), each GC pause."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = {"record write": [], "progress": [], "GC pause": []}
        self._gc_t0 = 0

    def timed(self, name: str, fn: Any, *args: Any) -> None:
        t0 = time.thread_time_ns()
        fn(*args)
        self.calls[name].append((time.thread_time_ns() - t0) / 1e6)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_t0 = time.thread_time_ns()
        else:
            self.calls["GC pause"].append((time.thread_time_ns() - self._gc_t0) / 1e6)

    @contextlib.contextmanager
    def watching_gc(self) -> Iterator[None]:
        gc.callbacks.append(self._on_gc)
        try:
            yield
        finally:
            gc.callbacks.remove(self._on_gc)

    def lines(self, seconds: float) -> list[str]:
        out = []
        for name, v in self.calls.items():
            if v:
                p = percentiles(v)
                out.append(
                    f"    {name:<13} {len(v):>5} calls  CPU p50 {p.p50:.3f} p99 {p.p99:.3f} max {max(v):.3f} ms  "
                    f"{sum(v) / seconds:.2f} ms per second ({sum(v) / seconds / 10:.3f} % of the time)"
                )
        return out


def tokenrace(
    srv: FakeServerProcess, sc: Scenario, rounds: int, v: Variant, tmp: Path, costs: Costs | None = None
) -> tuple[Bias, float | None]:
    step = StepPlan(sc.streams, sc.itl_ms, sc.tokens, rounds)
    store = RunStore(tmp / f"{time.perf_counter_ns()}", time.perf_counter_ns()) if v.records else None
    progress = progress_on_a_terminal(sc.streams * rounds) if v.progress else None
    c = costs or Costs()

    def sink(rec: RequestRecord) -> None:
        if store is not None:
            c.timed("record write", store.append, rec)
        if progress is not None:
            c.timed("progress", progress, rec)

    srv.reset()
    with conditions(v), progress or contextlib.nullcontext(), c.watching_gc():
        records, cpu = aio.run(drive(srv.base_url, step, sink, ttft_ms=sc.ttft_ms, keep_awake=v.spin))
    if store is not None:
        store.close()
    view = server_view(srv.log(wait_idle_s=2))
    bias = Bias()
    for r in records:
        entry = view.get(r.response_id or "")
        if r.ok and entry is not None:
            bias_of(r.start_ns, r.chunk_ns, entry[0], entry[1], bias)
    return bias, cpu


# --- report ---------------------------------------------------------------------------------------


def pooled(biases: list[Bias]) -> Bias:
    out = Bias()
    for b in biases:
        out.ttft += b.ttft
        out.itl += b.itl
        out.chunk += b.chunk
        out.request_leg += b.request_leg
    return out


def excess(a: Percentiles, f: Percentiles) -> str:
    if a.p50 is None or f.p50 is None or a.p99 is None or f.p99 is None:
        return "   —"
    return f"{a.p50 - f.p50:+.3f} / {a.p99 - f.p99:+.3f}"


def line(name: str, b: Bias, f: Bias | None, cpu: float | None = None) -> str:
    t, i, c, r = percentiles(b.ttft), percentiles(b.itl), percentiles(b.chunk), percentiles(b.request_leg)
    if f is None:
        return (
            f"  {name:<34} TTFT bias p50/p99 {t.p50:.3f} / {t.p99:.3f} ms   ITL bias {i.p50:+.3f} / {i.p99:+.3f}   "
            f"chunk bias {c.p50:.3f} / {c.p99:.3f}   request leg {r.p50:.3f} / {r.p99:.3f}   ({len(b.ttft)} requests)"
        )
    ft, fi, fc, fr = percentiles(f.ttft), percentiles(f.itl), percentiles(f.chunk), percentiles(f.request_leg)
    return (
        f"  {name:<34} excess over the floor, p50 / p99 ms: TTFT {excess(t, ft)}   ITL {excess(i, fi)}   "
        f"chunk {excess(c, fc)}   request leg {excess(r, fr)}   client CPU {cpu if cpu is not None else '—'}%"
    )


def verdict(sc: Scenario, b: Bias, f: Bias) -> str:
    t, ft = percentiles(b.ttft), percentiles(f.ttft)
    assert t.p50 is not None and t.p99 is not None and ft.p50 is not None and ft.p99 is not None
    e50, e99 = t.p50 - ft.p50, t.p99 - ft.p99
    ok = e50 <= sc.target_p50_ms and e99 <= sc.target_p99_ms
    return (
        f"VERDICT {sc.name.split(':')[0]}: {'MET' if ok else 'NOT MET'}: TTFT excess p50 {e50:+.3f} ms "
        f"(target <= {sc.target_p50_ms}), p99 {e99:+.3f} ms (target <= {sc.target_p99_ms})"
    )


def scenario(sc: Scenario, variants: tuple[Variant, ...], rounds: int, requests_rounds: int, tmp: Path) -> None:
    print(f"{sc.name}, {sc.tokens} tokens: {sc.streams * 1000 / sc.itl_ms:,.0f} chunks/s asked", flush=True)
    floors: list[Bias] = []
    runs: dict[str, list[Bias]] = {v.name: [] for v in variants}
    cpus: dict[str, list[float]] = {v.name: [] for v in variants}
    costs = Costs()
    t_bench = 0.0
    with spawn_fake_server({}) as srv:
        if PIN["server"] is not None:
            os.sched_setaffinity(srv.proc.pid, PIN["server"])
        for _ in range(rounds):
            floors.append(floor(srv, sc, requests_rounds))
            for v in variants:
                t0 = time.perf_counter()
                b, cpu = tokenrace(srv, sc, requests_rounds, v, tmp, costs if v is BENCH else None)
                t_bench += time.perf_counter() - t0 if v is BENCH else 0.0
                runs[v.name].append(b)
                if cpu is not None:
                    cpus[v.name].append(cpu)
    f = pooled(floors)
    print(line("the floor (raw sockets)", f, None))
    for v in variants:
        cpu = round(sum(cpus[v.name]) / len(cpus[v.name]), 1) if cpus[v.name] else None
        print(line(v.name, pooled(runs[v.name]), f, cpu))
    print(f"  bench's own work on the event loop ({BENCH.name}):")
    for text in costs.lines(t_bench):
        print(text)
    print(verdict(sc, pooled(runs[BENCH.name]), f), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the floor and bench as it runs, one round")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of each client (default 2, --quick 1)")
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="let the OS place the server and the clients (default: the server alone on the last core)",
    )
    a = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if not a.no_pin and len(cores) >= 2:
        # The server on a core of its own: a client's own work then cannot delay the server it
        # measures, which is the server's cost of sharing a core, not the client's inaccuracy.
        clients = set(cores[:-1])
        PIN["server"], PIN["clients"] = {cores[-1]}, clients
        os.sched_setaffinity(0, clients)  # the floor, a child, inherits it
    rounds = a.rounds or (1 if a.quick else 2)
    variants = (BENCH,) if a.quick else VARIANTS
    loop = aio.LOOP
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()} cores={os.cpu_count()} python={sys.version.split()[0]} loop={loop}"
    )
    print(f"# pinned: server on {PIN['server']}, clients on {PIN['clients']}" if PIN["server"] else "# not pinned")
    print(
        f"# load average {os.getloadavg()[0]:.2f}; vCPU stalls (gaps over 200 us in a busy loop, 2 s per core): {stalls(seconds=2)}"
    )
    with tempfile.TemporaryDirectory(prefix="tokenrace-accuracy-") as tmp:
        for sc in SCENARIOS:
            scenario(sc, variants, rounds, 3 if a.quick else 6, Path(tmp))


if __name__ == "__main__":
    main()
