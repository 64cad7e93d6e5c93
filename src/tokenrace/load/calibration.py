"""How far this machine's client can be trusted, and up to what load: `tokenrace calibrate`.

The built-in fake server runs in a process of its own (alone on the last core) and logs `perf_counter_ns()` just before it
writes each SSE event (CLOCK_MONOTONIC is shared between processes on Linux), and when each request
reached its handler. The client runs as `bench` runs it (the runner, the socket stamps, token counts
and a record file written per request) at rising stream counts and chunk rates. Each step's bias is
the client's figure minus the server's:

- TTFT bias: per request, the arrival stamp of its first content chunk minus the server's send stamp
  of that chunk. The other end of TTFT, the send, is stamped just before the `send()` that hands the
  request to the kernel, microseconds before it; on loopback that call delivers the bytes to the
  server's socket at once, so what follows before the server reads them (its own wake-up, its loop
  busy with other streams) is the server's time, logged apart as the request leg;
- ITL bias: per gap between content chunks, the client's gap minus the server's;
- chunk bias: per content chunk, its arrival stamp minus its send stamp.

The ceiling is the last step, in rising load, whose TTFT, ITL and chunk bias are all under 1 ms at
the median; the search stops at the first step that is not, or that the fake server (on the same
cores) could not send at the asked rate. The result is saved as `calibration.json` in the data
directory, and every bench compares its own load with it (figures/client_load.py).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeAlias

import psutil
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from tokenrace import __version__
from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.errors import UsageError
from tokenrace.load.prompts import single
from tokenrace.load.runner import Load, Runner
from tokenrace.load.tokens import fill_token_counts
from tokenrace.model.records import NS_PER_MS, RequestRecord
from tokenrace.model.stats import Percentiles
from tokenrace.paths import home
from tokenrace.stats import describe

CALIBRATION_SCHEMA_VERSION = 1
CALIBRATION_FILE = "calibration.json"
BIAS_LIMIT_MS = 1.0
# A step the fake server sent at under this share of the asked rate measured the server, not the client.
SERVER_KEPT_UP = 0.7


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


def _unmeasured() -> Percentiles:
    """A bias not measured: the median and p99 a calibration shows, undefined."""
    return Percentiles(p50=None, p99=None)


class MachineInfo(_Model):
    host: str
    cpu: str
    cores: int | None
    python: str
    event_loop: str
    tokenrace: str


class CalibrationStep(_Model):
    """One load level: `streams` in flight, each sent a content chunk every `itl_ms`."""

    streams: int
    itl_ms: float
    requests: int
    succeeded: int
    offered_chunks_per_s: float
    chunks_per_s: float | None = None  # content chunks that arrived, per second of the step
    ttft_bias_ms: Percentiles = Field(default_factory=_unmeasured)
    itl_bias_ms: Percentiles = Field(default_factory=_unmeasured)
    chunk_bias_ms: Percentiles = Field(default_factory=_unmeasured)
    request_leg_ms: Percentiles = Field(default_factory=_unmeasured)  # send -> the server read it
    client_cpu_pct: float | None = None  # the client process's CPU over the step, % of one core
    within_limit: bool = False  # every bias under the limit at the median


class Calibration(_Model):
    """calibration.json: the client's bias on this machine and the most load it keeps under 1 ms."""

    schema_version: int = CALIBRATION_SCHEMA_VERSION
    created_at: str
    machine: MachineInfo
    quick: bool = False
    bias_limit_ms: float = BIAS_LIMIT_MS
    # The last step within the limit; None when even the first was not.
    ceiling_chunks_per_s: float | None = None
    ceiling_streams: int | None = None
    # At the ceiling step (else the first step): what a run at or under that load can expect.
    ttft_bias_ms: Percentiles = Field(default_factory=_unmeasured)
    itl_bias_ms: Percentiles = Field(default_factory=_unmeasured)
    stopped: str = ""  # why the search ended
    steps: list[CalibrationStep] = Field(default_factory=list)


def calibration_path() -> Path:
    return home() / CALIBRATION_FILE


def load_calibration(path: Path | None = None) -> Calibration | None:
    """This machine's saved calibration, or None when there is none (or it cannot be read)."""
    p = path or calibration_path()
    try:
        return Calibration.model_validate_json(p.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None


def save_calibration(cal: Calibration, path: Path | None = None) -> Path:
    p = path or calibration_path()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".json.tmp")
        tmp.write_text(cal.model_dump_json(indent=2))
        os.replace(tmp, p)
    except OSError as exc:
        raise UsageError(f"cannot save the calibration to {p}: {exc.strerror}") from None
    return p


@dataclass(frozen=True, slots=True)
class ClientCeiling:
    """This machine's calibrated ceiling (None: no load was within the bias limit)."""

    chunks_per_s: float | None
    streams: int | None
    calibrated_at: str | None = None


def calibrated_ceiling() -> ClientCeiling | None:
    """This machine's ceiling for a bench to compare its load with; None when never calibrated."""
    cal = load_calibration()
    if cal is None:
        return None
    return ClientCeiling(cal.ceiling_chunks_per_s, cal.ceiling_streams, cal.created_at)


class CpuMeter:
    """This process's CPU time from its creation to `pct()`, as % of one core over the wall time."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._cpu0, self._t0 = _cpu_s(self._proc), time.perf_counter()

    def pct(self) -> float:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        return round(100.0 * (_cpu_s(self._proc) - self._cpu0) / wall, 1)


# --- bias: the client's stamps against the server's send log -------------------------------------


@dataclass(slots=True)
class Bias:
    """Per-event client-minus-server differences (ms) of one set of requests."""

    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    chunk: list[float] = field(default_factory=list)
    request_leg: list[float] = field(default_factory=list)  # send stamp -> the server read the request


# Per response id: (the request's bytes came off the server's socket, else its handler began; the
# send stamps of its content chunks), in ns.
ServerView: TypeAlias = dict[str, tuple[int, list[int]]]


def server_view(log: Sequence[dict[str, Any]]) -> ServerView:
    """The fake server's send log (its JSON, as `log()` returns it) read into a `ServerView`."""
    kinds = ("content", "reasoning")
    return {
        e["id"]: (e.get("received_ns") or e["arrival_ns"], [c["t_ns"] for c in e["chunks"] if c["kind"] in kinds])
        for e in log
    }


def bias_of(start_ns: int, arrivals: Sequence[int], server_in_ns: int, sent: Sequence[int], into: Bias) -> bool:
    """Add one request's differences to `into`; False when its chunks do not pair with the server's."""
    if not sent or len(sent) != len(arrivals):
        return False
    into.ttft.append((arrivals[0] - sent[0]) / NS_PER_MS)
    into.request_leg.append((server_in_ns - start_ns) / NS_PER_MS)
    into.chunk.extend((a - s) / NS_PER_MS for a, s in zip(arrivals, sent, strict=True))
    for i in range(1, len(sent)):
        into.itl.append(((arrivals[i] - arrivals[i - 1]) - (sent[i] - sent[i - 1])) / NS_PER_MS)
    return True


def record_bias(records: Sequence[RequestRecord], view: ServerView) -> Bias:
    out = Bias()
    for r in records:
        entry = view.get(r.response_id or "")
        if r.ok and entry is not None:
            bias_of(r.start_ns, r.chunk_ns, entry[0], entry[1], out)
    return out


def percentiles(values: Sequence[float]) -> Percentiles:
    d = describe(values)  # the one implementation every metric uses
    return Percentiles(p50=d.p50, p99=d.p99)


# --- the steps --------------------------------------------------------------------------------------

# (streams, ITL ms): offered content chunks/s = streams x 1000 / ITL, rising.
DEFAULT_STEPS: tuple[tuple[int, float], ...] = ((8, 10), (16, 5), (32, 5), (64, 5), (64, 2.5), (128, 2.5), (128, 1.25))
QUICK_STEPS: tuple[tuple[int, float], ...] = ((4, 5), (16, 2.5))
TTFT_MS = 20.0


@dataclass(frozen=True, slots=True)
class StepPlan:
    streams: int
    itl_ms: float
    tokens: int
    rounds: int  # each stream sends this many measured requests

    @property
    def offered_chunks_per_s(self) -> float:
        return self.streams * 1000.0 / self.itl_ms


def plan(quick: bool) -> list[StepPlan]:
    if quick:
        return [StepPlan(s, itl, tokens=20, rounds=2) for s, itl in QUICK_STEPS]
    return [StepPlan(s, itl, tokens=50, rounds=4) for s, itl in DEFAULT_STEPS]


Sink = Callable[[RequestRecord], None]


async def drive(
    base_url: str, step: StepPlan, sink: Sink | None = None, ttft_ms: float = TTFT_MS, keep_awake: bool = False
) -> tuple[list[RequestRecord], float | None]:
    """Run one step as bench would (`sink` writes each record, as bench's record file does); returns
    its measured records and the client process's CPU over the step (% of one core)."""
    # spin_ms 0: the server sleeps to each send instead of spinning its last millisecond; its send
    # stamps stay exact, and a small machine's core stays free for the client.
    fake: dict[str, JsonValue] = {
        "ttft_ms": ttft_ms,
        "itl_ms": step.itl_ms,
        "output_tokens": step.tokens,
        "role_chunk": True,
    }
    fake["spin_ms"] = 0
    opts = RequestOptions(max_tokens=None, extra_body={"fake": fake})

    async def finish(rec: RequestRecord, prompt: Prompt) -> None:
        await fill_token_counts(rec, prompt.as_text(), None)
        if sink is not None:
            sink(rec)
        rec.text = ""

    n = step.streams
    load = Load(concurrency=n, requests=n * step.rounds, warmup=n, cold=False, keep_awake=keep_awake)
    async with OpenAIClient(base_url, "fake-model", options=opts, max_connections=step.streams) as client:
        runner = Runner(client.send, single("hello"), load, finish)
        cpu = CpuMeter()
        await runner.run()
        pct = cpu.pct()
    return [r for r in runner.records if r.phase == "measure"], pct


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def summarize_step(step: StepPlan, records: Sequence[RequestRecord], view: ServerView) -> CalibrationStep:
    ok = [r for r in records if r.ok]
    bias = record_bias(ok, view)
    chunks = sum(len(r.chunk_ns) for r in ok)
    ends = [r.end_ns for r in ok if r.end_ns is not None]
    span_s = (max(ends) - min(r.start_ns for r in ok)) / 1e9 if ok and ends else 0.0
    row = CalibrationStep(
        streams=step.streams,
        itl_ms=step.itl_ms,
        requests=len(records),
        succeeded=len(ok),
        offered_chunks_per_s=round(step.offered_chunks_per_s, 1),
        chunks_per_s=round(chunks / span_s, 1) if span_s > 0 else None,
        ttft_bias_ms=percentiles(bias.ttft),
        itl_bias_ms=percentiles(bias.itl),
        chunk_bias_ms=percentiles(bias.chunk),
        request_leg_ms=percentiles(bias.request_leg),
    )
    medians = (row.ttft_bias_ms.p50, row.itl_bias_ms.p50, row.chunk_bias_ms.p50)
    row.within_limit = len(ok) == len(records) and all(m is not None and abs(m) < BIAS_LIMIT_MS for m in medians)
    return row


def why_stop(row: CalibrationStep) -> str | None:
    """None: go on to the next step; else why the search ends here."""
    where = f"{row.streams} streams at {row.offered_chunks_per_s:,.0f} chunks/s"
    if row.succeeded < row.requests:
        return f"{row.requests - row.succeeded} of {row.requests} requests failed at {where}"
    if not row.within_limit:
        return f"bias over {BIAS_LIMIT_MS:g} ms at the median at {where}"
    if row.chunks_per_s is None or row.chunks_per_s < SERVER_KEPT_UP * row.offered_chunks_per_s:
        got = f"{row.chunks_per_s:,.0f}" if row.chunks_per_s is not None else "no"
        return f"the fake server sent {got} of the {row.offered_chunks_per_s:,.0f} chunks/s asked at {where}: the ceiling is at least the last step's"
    return None


def assemble(rows: Sequence[CalibrationStep], stopped: str, quick: bool, loop: str) -> Calibration:
    passed = [r for r in rows if r.within_limit]
    best = passed[-1] if passed else None
    shown = best or (rows[0] if rows else None)
    return Calibration(
        created_at=datetime.now(UTC).isoformat(),
        machine=machine(loop),
        quick=quick,
        ceiling_chunks_per_s=best.chunks_per_s if best else None,
        ceiling_streams=best.streams if best else None,
        ttft_bias_ms=shown.ttft_bias_ms if shown else _unmeasured(),
        itl_bias_ms=shown.itl_bias_ms if shown else _unmeasured(),
        stopped=stopped,
        steps=list(rows),
    )


def machine(loop: str) -> MachineInfo:
    return MachineInfo(
        host=socket.gethostname(),
        cpu=platform.processor() or platform.machine(),
        cores=os.cpu_count(),
        python=sys.version.split()[0],
        event_loop=loop,
        tokenrace=__version__,
    )


async def calibrate_with(
    base_url: str, server: Any, quick: bool, loop: str, sink: Sink | None = None, on_step: Any = None
) -> Calibration:
    """Every step against a running fake server (`server.reset()`, `server.log()`)."""
    rows: list[CalibrationStep] = []
    stopped = "every step was within the limit"
    for step in plan(quick):
        server.reset()
        records, cpu = await drive(base_url, step, sink)
        row = summarize_step(step, records, server_view(server.log(wait_idle_s=2)))
        row.client_cpu_pct = cpu
        rows.append(row)
        if on_step is not None:
            on_step(row)
        reason = why_stop(row)
        if reason is not None:
            stopped = reason
            break
    return assemble(rows, stopped, quick, loop)
