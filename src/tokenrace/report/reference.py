"""The figures of a run's reference profile (`--profile`), as tables, and MLPerf Endpoints' Pareto
step plot for a sweep: declared once, rendered by tokenrace/table.py's renderers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenrace.model.metrics import AA_E2E_100, AA_OUTPUT_SPEED, AA_TTFT, SectionFigure
from tokenrace.model.reference import AaFigures, LlmperfFigures, ReferenceFigures
from tokenrace.model.run import StepRow
from tokenrace.model.stats import Spread
from tokenrace.table import Column, Table, num, text

AA_STATS = ("p5", "p25", "p50", "p75", "p95")  # what Artificial Analysis publishes
LLMPERF_STATS = ("p25", "p50", "p75", "p90", "p95", "p99", "mean", "min", "max")  # LLMPerf's metrics_summary


def _spread_row(table: Table, label: str, s: Spread, stats: Sequence[str], digits: int) -> None:
    table.add(text(label), *(num(getattr(s, k), digits) for k in stats), num(s.count, 0))


def _stat_table(title: str, stats: Sequence[str], source: str) -> Table:
    return Table(
        title,
        [Column("figure", "left"), *(Column(k.upper() if k.startswith("p") else k) for k in stats), Column("n")],
        notes=[f"as defined by {source}"],
    )


def named(figure: SectionFigure) -> str:
    """A figure with its unit, as a reference's rows and a watch's name it: "output speed, tok/s"."""
    return f"{figure.display.label}, {figure.display.unit}"


def aa_table(f: AaFigures, source: str) -> Table:
    t = _stat_table("Artificial Analysis figures", AA_STATS, source)
    speed, ttft, e2e = AA_OUTPUT_SPEED, AA_TTFT, AA_E2E_100
    _spread_row(t, f"{named(speed)} (after the first token)", f.output_speed_tok_s, AA_STATS, speed.display.digits)
    _spread_row(t, named(ttft), f.ttft_s, AA_STATS, ttft.display.digits)
    _spread_row(t, named(e2e), f.e2e_100_tokens_s, AA_STATS, e2e.display.digits)
    return t


def llmperf_table(f: LlmperfFigures, source: str) -> Table:
    t = _stat_table("LLMPerf figures", LLMPERF_STATS, source)
    _spread_row(t, "ttft_s", f.ttft_s, LLMPERF_STATS, 3)
    _spread_row(t, "inter_token_latency_s", f.inter_token_latency_s, LLMPERF_STATS, 4)
    _spread_row(t, "end_to_end_latency_s", f.end_to_end_latency_s, LLMPERF_STATS, 3)
    _spread_row(t, "request_output_throughput_token_per_s", f.request_output_throughput_token_per_s, LLMPERF_STATS, 1)
    _spread_row(t, "number_input_tokens", f.number_input_tokens, LLMPERF_STATS, 0)
    _spread_row(t, "number_output_tokens", f.number_output_tokens, LLMPERF_STATS, 0)
    t.notes.append(
        f"overall output throughput {num(f.overall_output_throughput).text} tok/s · "
        f"{f.num_completed_requests} completed · {num(f.completed_requests_per_min).text} per minute · "
        f"error rate {num(f.error_rate, 3).text}"
    )
    return t


def endpoints_table(rows: Sequence[tuple[str, ReferenceFigures | StepRow]]) -> Table:
    """MLPerf Endpoints' figures, one row per point (a run, or each step of a sweep)."""
    t = Table(
        "MLPerf Endpoints figures",
        [
            Column("point", "left"),
            Column("concurrency"),
            Column("system tok/s"),
            Column("tok/s per user"),
            Column("TTFT p90 ms"),
            Column("TPOT p90 ms"),
        ],
        notes=["tokens/s per user = 1000 ÷ TPOT p90; system tokens/s over the first send to the last completion"],
    )
    for name, item in rows:
        e = item.endpoints
        if e is None:
            continue
        t.add(
            text(name),
            num(e.concurrency, 0),
            num(e.system_tps),
            num(e.tps_per_user),
            num(e.ttft_p90_ms),
            num(e.tpot_p90_ms, 2),
        )
    return t


def reference_tables(ref: ReferenceFigures | None) -> list[Table]:
    """The tables of one run's reference figures (none without a profile)."""
    if ref is None:
        return []
    if ref.aa is not None:
        return [aa_table(ref.aa, ref.source)]
    if ref.llmperf is not None:
        return [llmperf_table(ref.llmperf, ref.source)]
    return [endpoints_table([("this run", ref)])]


def pareto_points(rows: Sequence[StepRow]) -> list[tuple[float, float, str]]:
    """(system tok/s, tok/s per user, step) of every step with both figures, by system tok/s."""
    pts = [
        (r.endpoints.system_tps, r.endpoints.tps_per_user, r.step)
        for r in rows
        if r.endpoints is not None and r.endpoints.system_tps is not None and r.endpoints.tps_per_user is not None
    ]
    return sorted(pts)


def pareto_front(points: Sequence[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The points no other point beats on both axes, by system tok/s: the step function's corners."""
    front: list[tuple[float, float, str]] = []
    for p in sorted(points, key=lambda q: (-q[0], -q[1])):
        if not front or p[1] > front[-1][1]:
            front.append(p)
    return sorted(front)


def pareto_figure(rows: Sequence[StepRow], go: Any) -> Any | None:
    """MLPerf Endpoints' Pareto plot: tokens/s per user against system tokens/s, every point and the
    frontier as a step function (None when no step has both figures)."""
    pts = pareto_points(rows)
    if not pts:
        return None
    front = pareto_front(pts)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[p[0] for p in pts],
            y=[p[1] for p in pts],
            text=[p[2] for p in pts],
            mode="markers+text",
            textposition="top center",
            name="points",
            marker={"size": 9, "color": "#2563eb"},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[p[0] for p in front],
            y=[p[1] for p in front],
            mode="lines",
            line={"shape": "vh", "color": "#f97316"},
            name="Pareto frontier",
        )
    )
    fig.update_xaxes(title_text="system tokens/s", rangemode="tozero")
    fig.update_yaxes(title_text="tokens/s per user (1000 ÷ TPOT p90)", rangemode="tozero")
    return fig
