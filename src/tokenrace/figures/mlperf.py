"""LoadGen's verdict, read from its own detail log, beside tokenrace's figures for the same requests.

LoadGen stamps a query's TTFT when `FirstTokenComplete` is called and its end when
`QuerySamplesComplete` is, both from the query's *scheduled* time; tokenrace stamps the same
request at the socket (send, first content chunk, end). The two agree when the client's hand-over
and bookkeeping take no time; the comparison says by how much they do not.

LoadGen's percentile is the value at index floor(p x n) of the sorted latencies (results.cc);
tokenrace's side of the comparison uses the same rule, so a difference is one of stamps, not of
interpolation.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from tokenrace.model.records import NS_PER_MS, RequestRecord
from tokenrace.stats import requests_needed

SUMMARY_LOG = "mlperf_log_summary.txt"
DETAIL_LOG = "mlperf_log_detail.txt"
LOG_FILES = (SUMMARY_LOG, DETAIL_LOG, "mlperf_log_accuracy.json", "mlperf_log_trace.json")
AGREE_MS = 1.0  # the two clocks "agree" within this many ms
PERCENTILES = (50.0, 90.0, 99.0)
PEAK_MARK = "Found peak performance field: "
# LoadGen's early-stopping test: 99 % confidence, no tolerance (results.cc, PerformanceSummary::EarlyStopping).
EARLY_STOPPING_CONFIDENCE = 0.99
_NEEDED = re.compile(r"Processed (\d+) queries.*?Would need to run at least (\d+) more queries", re.S)


@dataclass(frozen=True, slots=True)
class LoadgenResult:
    """What LoadGen concluded (mlperf_log_detail.txt's result_* entries). Latencies in ns, None when
    the scenario has none (offline)."""

    validity: str | None  # VALID | INVALID
    perf_constraints_met: bool | None
    min_duration_met: bool | None
    min_queries_met: bool | None
    early_stopping_met: bool | None
    invalid_reason: str | None
    early_stopping: tuple[str, ...]  # LoadGen's early-stopping lines (TTFT, then TPOT)
    query_count: int | None
    completed_samples_per_s: float | None  # server
    completed_tokens_per_s: float | None  # server: "Completed tokens per second"
    samples_per_s: float | None  # offline
    tokens_per_s: float | None  # offline: "Tokens per second"
    ttft_ns: dict[float, int] = field(default_factory=dict)  # percentile -> first token latency
    tpot_ns: dict[float, int] = field(default_factory=dict)  # percentile -> time per output token
    peak_qps: float | None = None  # find-peak: the highest rate that met the bounds
    # Per figure (TTFT, TPOT): the queries LoadGen's early-stopping test says the run needed in all
    # (processed + "would need to run at least K more"); absent when it passed or was not evaluated.
    early_stopping_needs: dict[str, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()  # what LoadGen logged as errors, in order


def read_loadgen(directory: Path) -> LoadgenResult | None:
    """LoadGen's result from the detail log in `directory`; None when there is none."""
    path = directory / DETAIL_LOG
    if not path.is_file():
        return None
    entries: dict[str, JsonValue] = {}
    errors: list[str] = []
    peak: float | None = None
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        try:
            obj = json.loads(line[len(":::MLLOG ") :])
        except json.JSONDecodeError:
            continue
        key, value = obj.get("key"), obj.get("value")
        if not isinstance(key, str):
            continue
        entries[key] = value
        if (obj.get("metadata") or {}).get("is_error"):
            errors.append(" ".join(str(value).split()))
        if key == "generic_message" and isinstance(value, str) and PEAK_MARK in value:
            peak = _number(value.split(PEAK_MARK, 1)[1].strip())
    return LoadgenResult(
        validity=_text(entries.get("result_validity")),
        perf_constraints_met=_bool(entries.get("result_perf_constraints_met")),
        min_duration_met=_bool(entries.get("result_min_duration_met")),
        min_queries_met=_bool(entries.get("result_min_queries_met")),
        early_stopping_met=_bool(entries.get("early_stopping_met")),
        invalid_reason=_text(entries.get("result_invalid_reason")),
        early_stopping=tuple(
            " ".join(str(v).split())
            for k in ("early_stopping_result", "early_stopping_ttft_result", "early_stopping_tpot_result")
            if (v := entries.get(k))
        ),
        early_stopping_needs={
            name: needs
            for name, key in (("TTFT", "early_stopping_ttft_result"), ("TPOT", "early_stopping_tpot_result"))
            if (needs := _needs(entries.get(key))) is not None
        },
        query_count=_int(entries.get("result_query_count")),
        completed_samples_per_s=_number(entries.get("result_completed_samples_per_sec")),
        completed_tokens_per_s=_number(entries.get("result_completed_tokens_per_second")),
        samples_per_s=_number(entries.get("result_samples_per_second")),
        tokens_per_s=_number(entries.get("result_tokens_per_second")),
        ttft_ns=_percentiles(entries, "result_first_token_{p}_percentile_latency_ns"),
        tpot_ns=_percentiles(entries, "result_time_per_output_token_{p}_percentile_ns"),
        peak_qps=peak,
        errors=tuple(errors),
    )


def loadgen_percentile(values: Sequence[float], p: float) -> float | None:
    """LoadGen's percentile: the sorted values' element at index floor(p/100 x n) (results.cc)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100.0))]


@dataclass(frozen=True, slots=True)
class Agreement:
    """One figure both sides measured: LoadGen's and tokenrace's value (ms) and their difference."""

    figure: str  # "TTFT p99", ...
    loadgen_ms: float | None
    tokenrace_ms: float | None  # from the socket stamps (TTFT: send to first content chunk)
    # TTFT only: from the moment LoadGen handed the query over (its issue callback) to the first
    # content chunk. LoadGen's TTFT starts at the query's scheduled time, so it counts the client's
    # hand-over and preparation too; this is the figure its clock should match.
    from_handover_ms: float | None = None

    @property
    def difference_ms(self) -> float | None:
        if self.loadgen_ms is None or self.tokenrace_ms is None:
            return None
        return self.loadgen_ms - self.tokenrace_ms

    @property
    def agrees(self) -> bool | None:
        d = self.difference_ms
        return None if d is None else abs(d) <= AGREE_MS

    @property
    def handover_difference_ms(self) -> float | None:
        if self.loadgen_ms is None or self.from_handover_ms is None:
            return None
        return self.loadgen_ms - self.from_handover_ms


def agreement(result: LoadgenResult, records: Iterable[RequestRecord]) -> list[Agreement]:
    """TTFT and TPOT at p50/p90/p99 as LoadGen logged them and as tokenrace's socket stamps give them
    for the same requests (the measured ones that succeeded), by LoadGen's percentile rule."""
    ttft: list[float] = []
    handover: list[float] = []
    tpot: list[float] = []
    for rec in records:
        if rec.phase != "measure" or not rec.ok:
            continue
        if rec.ttft_ms is not None:
            ttft.append(rec.ttft_ms)
        if rec.ttft_from_intended_ms is not None:
            handover.append(rec.ttft_from_intended_ms)
        if rec.tpot_ms is not None:
            tpot.append(rec.tpot_ms)
    rows: list[Agreement] = []
    for p in PERCENTILES:
        lg = result.ttft_ns.get(p)
        rows.append(
            Agreement(
                f"TTFT p{p:g}",
                None if lg is None else lg / NS_PER_MS,
                loadgen_percentile(ttft, p),
                loadgen_percentile(handover, p),
            )
        )
    for p in PERCENTILES:
        lg = result.tpot_ns.get(p)
        rows.append(Agreement(f"TPOT p{p:g}", None if lg is None else lg / NS_PER_MS, loadgen_percentile(tpot, p)))
    return rows


@dataclass(frozen=True, slots=True)
class EarlyStop:
    """LoadGen's early-stopping test computed with tokenrace's own rule (`stats.requests_needed`) on
    tokenrace's stamps: with `over` of `n` requests above the bound, the p99 is within it at 99 %
    confidence once `n >= needed`. A failed request counts as over (LoadGen counts its failure time)."""

    figure: str  # TTFT | TPOT
    bound_ms: float
    over: int
    n: int
    needed: int

    @property
    def met(self) -> bool:
        return self.n >= self.needed


def early_stops(records: Iterable[RequestRecord], ttft_ms: float, tpot_ms: float, q: float) -> list[EarlyStop]:
    """TTFT and TPOT against their bounds by the project's order-statistics rule, as LoadGen tests them."""
    measured = [r for r in records if r.phase == "measure"]
    out = []
    figures: tuple[tuple[str, Callable[[RequestRecord], float | None], float], ...] = (
        ("TTFT", lambda r: r.ttft_ms, ttft_ms),
        ("TPOT", lambda r: r.tpot_ms, tpot_ms),
    )
    for name, figure, bound in figures:
        over = 0
        for rec in measured:
            value = figure(rec) if rec.ok else None
            over += not rec.ok or (value is not None and value > bound)
        needed = requests_needed(q, EARLY_STOPPING_CONFIDENCE, over)
        out.append(EarlyStop(name, bound, over, len(measured), needed))
    return out


def _needs(v: JsonValue) -> int | None:
    m = _NEEDED.search(v) if isinstance(v, str) else None
    return int(m.group(1)) + int(m.group(2)) if m else None


def _percentiles(entries: dict[str, JsonValue], pattern: str) -> dict[float, int]:
    out: dict[float, int] = {}
    for p in PERCENTILES:
        v = _int(entries.get(pattern.format(p=f"{p:.2f}")))
        if v is not None:
            out[p] = v
    return out


def _text(v: Any) -> str | None:
    return str(v).strip() or None if v is not None else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _number(v: Any) -> float | None:
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None
