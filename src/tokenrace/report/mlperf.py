"""An MLPerf run's verdict: LoadGen's lines, and its figures beside tokenrace's for the same requests."""

from __future__ import annotations

from tokenrace.figures.mlperf import AGREE_MS, DETAIL_LOG, SUMMARY_LOG
from tokenrace.load.mlperf import MIN_DURATION_S, MlperfSpec
from tokenrace.runs.mlperf import MlperfResult
from tokenrace.table import Cell, Column, Table, Tone, num, text

NOT_COMPARABLE = (
    "not comparable with published MLPerf results: the run's minimum duration is {d:g} s, MLPerf's is "
    f"{MIN_DURATION_S:g} s"
)


def describe_spec(spec: MlperfSpec) -> str:
    """One line: the scenario, its bounds, its rate and minimums."""
    parts: list[str] = [spec.scenario]
    if spec.bounds_model:
        parts.append(f"bounds of {spec.bounds_model}")
    if spec.ttft_ms is not None and spec.tpot_ms is not None:
        parts.append(f"TTFT p99 <= {spec.ttft_ms:g} ms, TPOT p99 <= {spec.tpot_ms:g} ms")
    if spec.find_peak:
        parts.append(f"peak search from {spec.target_qps or 1:g} queries/s")
    elif spec.target_qps is not None:
        parts.append(f"{spec.target_qps:g} queries/s" + (" expected" if spec.scenario == "offline" else ""))
    parts.append(f"at least {spec.min_duration_s:g} s and {spec.min_queries:,} " + _unit(spec))
    return " · ".join(parts)


def _unit(spec: MlperfSpec) -> str:
    return "samples" if spec.scenario == "offline" else "queries"


def verdict_lines(result: MlperfResult) -> list[str]:
    """LoadGen's verdict as it logged it, then what a reader must know beside it."""
    lg = result.loadgen
    lines: list[str] = []
    if not result.spec.comparable:
        lines.append(NOT_COMPARABLE.format(d=result.spec.min_duration_s))
    if lg is None:
        lines.append(f"LoadGen wrote no result (no {DETAIL_LOG} in the run directory)")
        return lines
    lines.append(f"LoadGen: Result is {lg.validity or '—'}")
    for label, met in (
        ("performance constraints", lg.perf_constraints_met),
        ("min duration", lg.min_duration_met),
        ("min queries", lg.min_queries_met),
        ("early stopping", lg.early_stopping_met),
    ):
        if met is not None:
            lines.append(f"  {label} satisfied: {'yes' if met else 'NO'}")
    if lg.invalid_reason:
        lines.append(f"  why: {lg.invalid_reason}")
    for es in lg.early_stopping:
        lines.append(f"  early stopping: {es}")
    if lg.completed_tokens_per_s is not None:
        lines.append(f"  Completed tokens per second: {lg.completed_tokens_per_s:,.2f}")
    if lg.completed_samples_per_s is not None:
        lines.append(f"  Completed samples per second: {lg.completed_samples_per_s:,.2f}")
    if lg.tokens_per_s is not None:
        lines.append(f"  Tokens per second: {lg.tokens_per_s:,.2f}")
    if lg.samples_per_s is not None:
        lines.append(f"  Samples per second: {lg.samples_per_s:,.2f}")
    if lg.peak_qps is not None:
        lines.append(f"  peak rate found: {lg.peak_qps:g} queries/s")
    for message in lg.errors[:3]:
        lines.append(f"  LoadGen error: {message}")
    if len(lg.errors) > 3:
        lines.append(f"  ... {len(lg.errors) - 3} more LoadGen errors in {DETAIL_LOG}")
    for stop in result.early_stops:
        mark = "met" if stop.met else "not met"
        lines.append(
            f"tokenrace's early stopping on its own stamps: {stop.figure} {stop.over:,} of {stop.n:,} over "
            f"{stop.bound_ms:g} ms; the p99 is within it at 99 % confidence from {stop.needed:,} requests: {mark}"
        )
    if result.failed:
        lines.append(
            f"tokenrace: {result.failed} request(s) failed, so this is no valid MLPerf run whatever LoadGen "
            "says: LoadGen counted each as answered when it failed (and its latencies hold them; tokenrace's do not)"
        )
    if result.padded:
        lines.append(
            f"tokenrace: {result.padded} answer(s) had fewer than 2 tokens and were given to LoadGen as 2 "
            "(its TPOT needs 2 or more)"
        )
    if result.spec.find_peak:
        lines.append(
            f"find-peak: LoadGen's figures are its peak trial's; tokenrace's cover all {result.trials} trials, "
            "so the two are not compared"
        )
    return lines


def agreement_table(result: MlperfResult) -> Table:
    """LoadGen's TTFT and TPOT percentiles beside tokenrace's for the same requests."""
    table = Table(
        "LoadGen beside tokenrace (same requests, ms; percentiles by LoadGen's rule)",
        [
            Column("figure", "left"),
            Column("LoadGen"),
            Column("tokenrace (socket)"),
            Column("difference"),
            Column("tokenrace from hand-over"),
            Column("difference"),
        ],
    )
    disagree = []
    for a in result.agreement:
        d = a.difference_ms
        tone: Tone = "" if a.agrees is None or a.agrees else "warn"
        if a.agrees is False:
            disagree.append(f"{a.figure} by {d:+.3f} ms")
        table.add(
            text(a.figure),
            num(a.loadgen_ms, 3),
            num(a.tokenrace_ms, 3),
            Cell(d, 3, sign=True, tone=tone),
            num(a.from_handover_ms, 3),
            Cell(a.handover_difference_ms, 3, sign=True),
        )
    table.notes.append(
        "LoadGen stamps a query from its scheduled time to its FirstTokenComplete / QuerySamplesComplete "
        "calls; tokenrace from the request's last byte at the socket to the arrival of the first content "
        "chunk. 'from hand-over' starts when LoadGen handed the query to tokenrace."
    )
    if disagree:
        table.notes.append(f"they disagree by more than {AGREE_MS:g} ms: " + "; ".join(disagree))
        if result.failed:
            # Not a clock difference: the two sides hold different requests.
            table.notes.append(
                f"{result.failed} of the requests failed: LoadGen counts each as answered when it failed, "
                "tokenrace's percentiles hold only the requests that succeeded"
            )
    return table


def log_lines(result: MlperfResult) -> list[str]:
    d = result.run.directory
    return [f"LoadGen's logs: {d / SUMMARY_LOG}, {d / DETAIL_LOG}"]
