"""One self-contained HTML report for a run, a sweep or a comparison. Works offline: plotly.js is
inlined once, and nothing is fetched. Rendered from saved files only (never re-measured).

Charts: latency CDFs (TTFT, TPOT, E2E); for sweeps TTFT/TPOT/throughput against load with the knee
and, when known, the speed-of-light line; a per-request timeline; tokens per chunk; resource charts
from timeseries.jsonl when the run has one; and the manifest. A run with a quality pass gets a
quality section (report/quality_html.py); a comparison, the two sides' accuracies and paired verdict.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from tokenrace import __version__
from tokenrace.errors import UsageError
from tokenrace.figures.cost import CostSpec, cost_of
from tokenrace.model.metrics import DECODE_EFFICIENCY, E2E, THROUGHPUT, TPOT, TTFT, Metric, SectionFigure
from tokenrace.model.monitor import TimeseriesLine
from tokenrace.model.records import RequestRecord
from tokenrace.model.run import StepRow, SweepFile
from tokenrace.model.summary import Cost
from tokenrace.plan import plan
from tokenrace.quality.models import load_quality
from tokenrace.report.compare import Report, compare, compare_table, cost_rows
from tokenrace.report.headline import named, run_headline, said, sweep_headline, to_cards
from tokenrace.report.quality import quality_dir
from tokenrace.report.quality_html import comparison_quality_html, run_quality_html
from tokenrace.report.reference import endpoints_table, pareto_figure, reference_tables
from tokenrace.report.sla import sla_html
from tokenrace.report.tables import manifest_table, steps_table, summary_table, with_costs
from tokenrace.runs.run import Run
from tokenrace.table import num, to_html

PALETTE = ("#2563eb", "#f97316", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777")
MAX_TIMELINE = 1500  # requests drawn in a timeline; more are thinned evenly (and the chart says so)
MAX_RESOURCE_SERIES = 12
LAYOUT = {
    "template": "plotly_white",
    "font": {"family": "Inter, system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12, "color": "#1f2937"},
    "margin": {"l": 60, "r": 20, "t": 48, "b": 48},
    "legend": {"orientation": "h", "y": -0.18},
    "hoverlabel": {"font": {"family": "ui-monospace, monospace"}},
}
SpeedOfLight = Callable[[Run], float | None]


def plotly() -> Any:
    try:
        import plotly.graph_objects as go  # noqa: PLC0415 - import cost: plotly only when a report is drawn
    except ImportError:
        raise UsageError("the HTML report needs plotly: pip install plotly") from None
    return go


@dataclass(slots=True)
class Page:
    title: str
    subtitle: str
    sections: list[str] = field(default_factory=list)
    _charts: int = 0

    def chart(self, fig: Any, caption: str | None = None, height: int = 380) -> str:
        self._charts += 1
        fig.update_layout(**LAYOUT, height=height)
        div = fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=f"chart-{self._charts}",
            config={"displaylogo": False, "responsive": True},
        )
        cap = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
        return f'<figure class="chart">{div}{cap}</figure>'

    def add(self, heading: str, *parts: str, note: str | None = None) -> None:
        n = f'<p class="note">{html.escape(note)}</p>' if note else ""
        self.sections.append(f"<section><h2>{html.escape(heading)}</h2>{n}{''.join(parts)}</section>")


# --- data ------------------------------------------------------------------------------------------


def _vals(run: Run, key: str) -> np.ndarray:
    found = (getattr(r, key) for r in run.measured_ok())
    return np.sort(np.array([v for v in found if v is not None], dtype=float))


def _cdf_y(n: int) -> np.ndarray:
    return np.arange(1, n + 1) / n


# --- charts ----------------------------------------------------------------------------------------


def axis(figure: Metric | SectionFigure) -> str:
    """A chart's title for a declared figure: its label and unit, "TTFT (ms)"."""
    d = figure.displayed
    return f"{d.label} ({d.unit})"


def cdf_figure(runs: Sequence[tuple[str, Run]]) -> Any:
    go = plotly()
    from plotly.subplots import make_subplots  # noqa: PLC0415 - import cost: plotly only when a report is drawn

    metrics = [(m.name, axis(m)) for m in (TTFT, TPOT, E2E)]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[m[1] for m in metrics], horizontal_spacing=0.06)
    for i, (name, run) in enumerate(runs):
        color = PALETTE[i % len(PALETTE)]
        for col, (key, label) in enumerate(metrics, 1):
            x = _vals(run, key)
            if x.size:
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=_cdf_y(x.size),
                        mode="lines",
                        name=name,
                        legendgroup=name,
                        showlegend=col == 1,
                        line={"color": color, "width": 2, "shape": "hv"},
                        hovertemplate=f"{label}: %{{x:.2f}}<br>share ≤: %{{y:.1%}}<extra>{html.escape(name)}</extra>",
                    ),
                    row=1,
                    col=col,
                )
    fig.update_yaxes(tickformat=".0%", range=[0, 1.01])
    fig.update_yaxes(title_text="share of requests", row=1, col=1)
    return fig


def timeline_figure(run: Run) -> tuple[Any, str | None]:
    go = plotly()
    recs = sorted(run.measured(), key=lambda r: r.start_ms or 0.0)
    note = None
    if len(recs) > MAX_TIMELINE:
        idx = np.linspace(0, len(recs) - 1, MAX_TIMELINE).astype(int)
        note = f"{MAX_TIMELINE} of {len(recs)} requests shown, evenly spaced"
        recs = [recs[i] for i in idx]
    t0 = min((r.start_ms or 0.0) for r in recs) if recs else 0.0
    rows = [TimelineBar.of(r, t0) for r in recs]
    fig = go.Figure()
    for kind, color, label in (
        ("wait", "#93c5fd", "waiting for first token"),
        ("stream", "#2563eb", "streaming"),
        ("error", "#dc2626", "failed"),
    ):
        spans = [(x, span) for x in rows if (span := getattr(x, kind)) is not None]
        if spans:
            fig.add_trace(
                go.Bar(
                    y=[x.seq for x, _ in spans],
                    base=[begin for _, (begin, _end) in spans],
                    x=[end - begin for _, (begin, end) in spans],
                    orientation="h",
                    name=label,
                    marker={"color": color, "line": {"width": 0}},
                    width=0.9,
                    customdata=[x.info for x, _ in spans],
                    hovertemplate="%{customdata}<extra></extra>",
                )
            )
    fig.update_layout(barmode="overlay", bargap=0)
    fig.update_xaxes(title_text="time since the first measured request (s)")
    # One category per request in start order, failed or not (traces would otherwise append theirs).
    fig.update_yaxes(
        title_text="request (by start)",
        autorange="reversed",
        showticklabels=len(rows) <= 40,
        categoryorder="array",
        categoryarray=[x.seq for x in rows],
        type="category",
    )
    return fig, note


Span = tuple[float, float]  # seconds since the first measured request: from, to


@dataclass(frozen=True, slots=True)
class TimelineBar:
    """One request on the timeline: waiting for its first token, then streaming; or failed."""

    seq: str
    info: str  # the hover text
    wait: Span | None
    stream: Span | None
    error: Span | None

    @classmethod
    def of(cls, r: RequestRecord, t0: float) -> TimelineBar:
        start = ((r.start_ms or 0.0) - t0) / 1000
        e2e, ttft = r.e2e_ms, r.ttft_ms
        end = start + (e2e or 0.0) / 1000
        first = start + ttft / 1000 if ttft is not None else None
        failed = r.error_kind is not None
        took = f"{TTFT.displayed.label} {said(TTFT, ttft)}, {E2E.displayed.label} {said(E2E, e2e)}"
        info = f"#{r.seq}: start {start:.3f} s, {took}, {r.output_tokens or 0} tokens" + (
            f", {r.error_kind}" if failed else ""
        )
        return cls(
            seq=f"#{r.seq}",
            info=info,
            wait=None if failed else (start, first if first is not None else end),
            stream=None if failed or first is None else (first, end),
            error=(start, max(end, start + 0.001)) if failed else None,
        )


def chunk_figure(runs: Sequence[tuple[str, Run]]) -> tuple[Any | None, str]:
    """Tokens per content chunk; per-request averages when exact per-chunk counts are unknown."""
    go = plotly()
    fig = go.Figure()
    exact = all(any(r.chunk_tokens for r in run.measured_ok()) for _, run in runs)
    for i, (name, run) in enumerate(runs):
        sizes = _chunk_sizes(run, exact)
        if sizes:
            fig.add_trace(
                go.Histogram(
                    x=sizes,
                    name=name,
                    marker={"color": PALETTE[i % len(PALETTE)]},
                    opacity=0.85,
                    xbins={"size": 1 if exact else 0.25},
                    histnorm="percent",
                    hovertemplate="%{x} tokens: %{y:.1f} %<extra></extra>",
                )
            )
    if not fig.data:
        return None, "Token counts per chunk are unknown for these runs."
    fig.update_layout(barmode="group", bargap=0.35, bargroupgap=0.08)
    fig.update_xaxes(
        title_text="tokens in a content chunk" if exact else "output tokens ÷ content chunks, per request",
        dtick=1 if exact else None,
        rangemode="tozero",
    )
    fig.update_yaxes(title_text="% of chunks" if exact else "% of requests")
    caption = (
        "How many tokens each streamed chunk carried."
        if exact
        else "Exact per-chunk counts are unknown (no per-chunk token counts in the records): each request's average instead."
    )
    return fig, caption


def _chunk_sizes(run: Run, exact: bool) -> list[float]:
    recs = run.measured_ok()
    if exact:
        return [k for r in recs for k in (r.chunk_tokens or [])]
    return [r.output_tokens / len(r.chunk_offsets_ms) for r in recs if r.output_tokens and r.chunk_offsets_ms]


def _load_of(row: StepRow, kind: str) -> float | None:
    if kind == "input_tokens":
        return row.prompt_tokens_mean
    if kind in ("rate", "goodput") or (kind == "sla" and row.rate is not None):
        return row.rate
    return row.concurrency


def sweep_figure(sweeps: Sequence[Run], sol: SpeedOfLight | None) -> Any:
    go = plotly()
    from plotly.subplots import make_subplots  # noqa: PLC0415 - import cost: plotly only when a report is drawn

    kind = sweeps[0].sweep_kind or "concurrency"  # a profile is a concurrency ramp
    xlabel = {
        "concurrency": "concurrency",
        "rate": "offered rate (req/s)",
        "goodput": "offered rate (req/s)",
        "input_tokens": "prompt tokens (mean)",
        "sla": "offered rate (req/s)" if _sla_search(sweeps[0]) == "rate" else "concurrency",
        "content": "content (the kind of text written)",
    }[kind]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(axis(TTFT), axis(TPOT), axis(THROUGHPUT)),
        horizontal_spacing=0.07,
    )
    for i, sw in enumerate(sweeps):
        steps = sw.sweep.steps
        if kind == "sla":  # a load measured again: its last run stands for it
            steps = list({_load_of(r, kind): r for r in steps}.values())
        rows = sorted(steps, key=lambda r: _load_of(r, kind) or 0)
        x: list[Any] = [_load_of(r, kind) for r in rows]
        if kind == "content":  # one step per kind, in the order they ran: a category axis
            rows = list(sw.sweep.steps)
            x = [r.content or r.step for r in rows]
        color = PALETTE[i % len(PALETTE)]
        for col, key in ((1, "ttft_ms"), (2, "tpot_ms")):
            for q, dash in (("p50", "solid"), ("p95", "dot")):
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=[getattr(getattr(r, key), q) for r in rows],
                        mode="lines+markers",
                        line={"color": color, "dash": dash},
                        name=f"{sw.name} {q}",
                        legendgroup=f"{sw.name}{q}",
                        showlegend=col == 1,
                    ),
                    row=1,
                    col=col,
                )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[r.throughput_tokens_per_s for r in rows],
                mode="lines+markers",
                line={"color": color, "width": 3},
                name=f"{sw.name} throughput",
            ),
            row=1,
            col=3,
        )
        _mark_knee(fig, sw, kind, color)
        _mark_sla(fig, sw, x, color)
        _speed_of_light(fig, sw, rows, x, sol)
    if kind in ("concurrency", "rate", "goodput", "sla"):
        fig.update_xaxes(type="log", dtick=float(np.log10(2)) if kind == "concurrency" else None)
    fig.update_xaxes(title_text=xlabel)
    return fig


def _sla_search(sw: Run) -> str | None:
    """What an SLA search varied (concurrency or rate); None for any other sweep."""
    s = sw.sweep
    return s.sla.search if isinstance(s, SweepFile) and s.sla else None


def _mark_sla(fig: Any, sw: Run, x: list[float | None], color: str) -> None:
    """An SLA search's limits (horizontal lines on the TTFT and TPOT charts) and its boundary (a
    vertical line at the highest passing load on every chart)."""
    s = sw.sweep
    sla = s.sla if isinstance(s, SweepFile) else None
    if not sla:
        return
    go = plotly()
    xs = [v for v in x if v is not None]
    for o in sla.objectives:
        col = {"ttft": 1, "tpot": 2}.get(o.figure or "")
        if col is None or not xs:
            continue
        fig.add_trace(
            go.Scatter(
                x=[min(xs), max(xs)],
                y=[o.limit, o.limit],
                mode="lines",
                line={"color": "#dc2626", "dash": "dash", "width": 1},
                name=f"limit {o.text}",
            ),
            row=1,
            col=col,
        )
    best = sla.highest_passing.load(sla.search) if sla.highest_passing else None
    if best is None:
        return
    for col in (1, 2, 3):
        fig.add_vline(x=best, line={"color": color, "dash": "dot", "width": 2}, row=1, col=col)


def _mark_knee(fig: Any, sw: Run, kind: str, color: str) -> None:
    """A star on the throughput curve and a dashed drop line (traces, which use data units on log axes too)."""
    knee = sw.knee
    if not knee:
        return
    go = plotly()
    row = next(r for r in sw.sweep.steps if r.step == knee.step)
    x, y = _load_of(row, kind), row.throughput_tokens_per_s
    d = THROUGHPUT.display
    fig.add_trace(
        go.Scatter(
            x=[x, x],
            y=[0, y],
            mode="lines",
            line={"color": color, "dash": "dash", "width": 1},
            hoverinfo="skip",
            showlegend=False,
        ),
        row=1,
        col=3,
    )
    fig.add_trace(
        go.Scatter(
            x=[x],
            y=[y],
            mode="markers+text",
            marker={"symbol": "star", "size": 16, "color": color},
            text=[f"knee {knee.step}"],
            textposition="top left",
            name=f"{sw.name} knee",
            hovertemplate=f"knee {knee.step}: %{{y:.{d.digits}f}} {d.unit}<extra></extra>",
        ),
        row=1,
        col=3,
    )


def _speed_of_light(fig: Any, sw: Run, rows: list[StepRow], x: list[Any], sol: SpeedOfLight | None) -> None:
    if sol is None:
        return
    steps = dict(sw.steps)
    bounds = [sol(steps[r.step]) if r.step in steps else None for r in rows]
    if any(b is not None for b in bounds):
        go = plotly()
        fig.add_trace(
            go.Scatter(
                x=x, y=bounds, mode="lines", line={"color": "#6b7280", "dash": "dashdot"}, name="speed of light (plan)"
            ),
            row=1,
            col=3,
        )


def resource_figure(samples: Sequence[TimeseriesLine]) -> Any | None:
    series = resource_series(samples)
    if not series:
        return None
    go = plotly()
    from plotly.subplots import make_subplots  # noqa: PLC0415 - import cost: plotly only when a report is drawn

    names = list(series)[:MAX_RESOURCE_SERIES]
    cols = 3
    nrows = (len(names) + cols - 1) // cols
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=names, vertical_spacing=0.12 if nrows > 1 else 0.2)
    for i, name in enumerate(names):
        t, v = series[name]
        fig.add_trace(
            go.Scatter(x=t, y=v, mode="lines", line={"color": PALETTE[i % len(PALETTE)]}, name=name, showlegend=False),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_xaxes(title_text="s")
    fig.update_layout(height=260 * nrows)
    return fig


def resource_series(samples: Sequence[TimeseriesLine]) -> dict[str, tuple[list[float], list[float | None]]]:
    """Flatten each sample to numeric leaves ('gpu0.util_pct', 'system.cpu_pct', ...) against seconds.
    Series that never change (totals, limits) are left out."""
    flat: dict[str, dict[int, float]] = {}
    times: list[float] = []
    for sample in samples:
        s = sample.model_dump()  # with any keys a newer monitor added
        t = s.get("t_ms", None)
        t = t / 1000 if isinstance(t, (int, float)) else s.get("t")
        if not isinstance(t, (int, float)):
            continue
        times.append(float(t))
        for key, value in _leaves(s, ""):
            if key not in ("t", "t_ms"):
                flat.setdefault(key, {})[len(times) - 1] = value
    out = {}
    for key, vals in flat.items():
        if len(set(vals.values())) > 1:
            out[key] = (times, [vals.get(j) for j in range(len(times))])
    return out


def _leaves(obj: Any, prefix: str) -> list[tuple[str, float]]:
    if isinstance(obj, bool) or obj is None:
        return []
    if isinstance(obj, (int, float)):
        return [(prefix, float(obj))]
    if isinstance(obj, dict):
        return [leaf for k, v in obj.items() for leaf in _leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(obj, list) and all(isinstance(x, dict) for x in obj):
        return [leaf for i, x in enumerate(obj) for leaf in _leaves(x, f"{prefix}{x.get('index', i)}")]
    return []


# --- tables and cards --------------------------------------------------------------------------------


def _cost(run: Run, cost: CostSpec | None) -> Cost | None:
    return cost_of(run.summary, run.manifest.provider, run.manifest.model, cost)


def _text(value: object, missing: str = "—") -> str:
    """A value as a reader sees it: a missing one is a dash (or the reason it is missing), never None."""
    return missing if value is None or value == "" else str(value)


def _where(model: str | None, endpoint: str | None) -> str:
    """`model @ endpoint`, with a dash for what the files do not say."""
    return f"{_text(model)} @ {_text(endpoint)}"


def _when(text: str | None) -> str:
    if not text:
        return ""
    try:
        return datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return text


def comparison_html(report: Report) -> str:
    parts = []
    if report.warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in report.warnings)
        parts.append(
            f"<div class='warn'><strong>Conditions differ — not a like-for-like comparison</strong><ul>{items}</ul></div>"
        )
    parts += [to_html(compare_table(c)) for c in report.comparisons]
    parts.append(
        "<p class='note'>B/A: ratio of B's statistic to A's. 95 % CI: percentile bootstrap over requests "
        "(2000 resamples, seed 0). A difference is significant when its CI excludes 1 (error rate: 0 pp).</p>"
    )
    return "".join(parts)


def manifest_html(runs: Sequence[tuple[str, Run]]) -> str:
    """Each run's manifest table (the one `tokenrace show` prints), and its whole manifest.json."""
    out = []
    for name, run in runs:
        m = run.manifest
        dump = html.escape(json.dumps(m.model_dump(mode="json"), indent=2, ensure_ascii=False))
        out.append(
            to_html(manifest_table(m, name))
            + f"<details><summary>full manifest.json</summary><pre>{dump}</pre></details>"
        )
    return "".join(out)


# --- the page ----------------------------------------------------------------------------------------


def build(inputs: Sequence[Run], cost: CostSpec | None = None, sol: SpeedOfLight | None = None) -> str:
    """The report's HTML for one run, one sweep, or several of either (a comparison)."""
    if not inputs:
        raise UsageError("nothing to report")
    kinds = {r.kind for r in inputs}
    if len(inputs) > 1:
        page = _comparison_page(list(inputs), cost, sol)
    elif kinds <= {"sweep", "profile"}:
        page = _sweep_page(inputs[0], cost, sol)
    else:
        page = _run_page(inputs[0], cost, sol)
    return render(page)


def _run_page(run: Run, cost: CostSpec | None, sol: SpeedOfLight | None) -> Page:
    m = run.manifest
    page = Page(_where(m.model, m.endpoint), f"run {run.name} · {_when(m.started_at)}")
    bound = sol(run) if sol else None
    # The headline the terminal prints under the summary table, as cards (report/headline.py).
    cards = to_cards(run_headline(run.summary, _cost(run, cost), bound))
    page.add("Key numbers", cards, to_html(summary_table(run.summary)))
    for table in reference_tables(run.summary.reference):
        page.add(table.title or "Reference figures", to_html(table, heading=False))
    # The run's own findings first, then the monitor's advice (the order the page has always had).
    warnings = run.summary.warnings
    findings = [w for w in warnings if not w.code.startswith("resources.")]
    findings += [w for w in warnings if w.code.startswith("resources.")]
    if findings:
        items = "".join(f"<li>{html.escape(w.message)}</li>" for w in findings)
        page.add("What a sceptic would ask", f"<ul class='warnings'>{items}</ul>")
    _speed_of_light_section(page, run)
    _quality_section(page, run)
    _run_charts(page, [(run.name, run)])
    return page


def _speed_of_light_section(page: Page, run: Run) -> None:
    """The run against the planner's bound, beside the nearest published point against its own."""
    eff = run.summary.efficiency
    if eff is None or eff.decode_tokens_per_s_bound is None:
        return
    lines = [
        f"This run: {named(DECODE_EFFICIENCY, eff.decode_pct_of_bound)} "
        f"({num(eff.decode_tokens_per_s_bound).text} tokens/s per user on {eff.devices} × {eff.hardware}, "
        f"{eff.precision}; bound by {eff.decode_bound_by})."
    ]
    if eff.nearest_published:
        lines.append(f"Nearest published point: {eff.nearest_published}.")
    else:
        lines.append("No published point for this model is in the planner's table.")
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    page.add("Speed of light and published points", f"<ul>{items}</ul>")


def _quality_section(page: Page, run: Run) -> None:
    d = quality_dir(run.directory)
    result = load_quality(d) if d is not None else None
    if d is not None and result is not None:
        page.add("Quality: are the answers right?", run_quality_html(result, d))


def _run_charts(page: Page, runs: list[tuple[str, Run]]) -> None:
    page.add(
        "Latency distributions", page.chart(cdf_figure(runs), "Cumulative share of requests at or below each latency.")
    )
    for name, run in runs[:4]:
        fig, note = timeline_figure(run)
        height = max(280, min(520, 9 * len(run.measured()) + 120))
        page.add(
            f"Requests over time: {name}",
            page.chart(
                fig,
                note
                or "Each bar is one request: waiting for its first "
                "token (light), then streaming (dark); failures in red.",
                height=height,
            ),
        )
    chunks, caption = chunk_figure(runs)
    page.add("Tokens per chunk", page.chart(chunks, caption) if chunks else "", note=None if chunks else caption)
    for name, run in runs:
        res = resource_figure(run.timeseries())
        if res is not None:
            page.add(f"Resources: {name}", page.chart(res, "From timeseries.jsonl (tokenrace monitor)."))
    page.add("Manifest", manifest_html(runs))


def _sweep_page(sw: Run, cost: CostSpec | None, sol: SpeedOfLight | None) -> Page:
    s = sw.sweep
    what = "embedded profile" if sw.kind == "profile" else f"{sw.sweep_kind or 'concurrency'} sweep"
    started = s.started_at if isinstance(s, SweepFile) else None
    page = Page(f"{what}: {_where(s.model, s.endpoint)}", f"{sw.name} · {_when(started or sw.manifest.started_at)}")
    priced = with_costs(sw, cost)
    page.add("Key numbers", to_cards(sweep_headline(priced)), to_html(steps_table(priced), heading=False))
    if isinstance(s, SweepFile) and s.sla:
        page.add("SLA search", sla_html(s))
    _endpoints_section(page, s.steps)
    _quality_section(page, sw)
    knee_note = " The star marks the knee." if sw.knee else ""
    knee_note += " Dashed red: the SLA limits; dotted: the highest passing load." if _sla_search(sw) else ""
    page.add(
        "Latency and throughput against load",
        page.chart(sweep_figure([sw], sol), "Solid: p50, dotted: p95." + knee_note, 420),
    )
    _run_charts(page, _focus_steps(sw))
    return page


def _endpoints_section(page: Page, rows: list[StepRow]) -> None:
    """MLPerf Endpoints' figures per point and its Pareto step plot (`--profile endpoints`)."""
    fig = pareto_figure(rows, plotly())
    if fig is None:
        return
    page.add(
        "MLPerf Endpoints: tokens/s per user against system tokens/s",
        page.chart(
            fig, "Each point is one fixed concurrency (and the offline point); the line is the Pareto frontier."
        ),
        to_html(endpoints_table([(r.step, r) for r in rows])),
    )


def _focus_steps(sw: Run) -> list[tuple[str, Run]]:
    """The steps to draw in detail: every step's CDF would crowd; keep the first, the knee and the last."""
    steps = dict(sw.steps)
    names = [r.step for r in sw.sweep.steps if r.step in steps]
    knee = sw.knee.step if sw.knee else None
    pick = [n for n in dict.fromkeys([names[0], knee, names[-1]] if names else []) if n]
    return [(n, steps[n]) for n in pick]


def _comparison_page(inputs: list[Run], cost: CostSpec | None, sol: SpeedOfLight | None) -> Page:
    report = compare(inputs, extra=cost_rows(cost))
    names = " vs ".join(r.name for r in inputs)
    page = Page(f"Comparison: {names}", f"baseline (A): {inputs[0].name}")
    if all(r.kind == "run" for r in inputs):
        page.add("Side by side", comparison_html(report))
        _comparison_quality(page, report)
        _run_charts(page, [(r.name, r) for r in inputs])
        return page
    page.add(
        "Latency and throughput against load", page.chart(sweep_figure(inputs, sol), "Solid: p50, dotted: p95.", 420)
    )
    page.add("Step by step", comparison_html(report))
    _comparison_quality(page, report)
    return page


def _comparison_quality(page: Page, report: Report) -> None:
    if report.quality:
        page.add(
            "Quality: does the faster one still answer correctly?",
            *(comparison_quality_html(q) for q in report.quality),
            note="Accuracy with Wilson's 95 % interval per side; over the items both answered, who is right "
            "where, the exact McNemar p-value, and B - A with its 95 % interval and verdict.",
        )


CSS = """
:root { --ink:#111827; --muted:#6b7280; --line:#e5e7eb; --bg:#f8fafc; --accent:#2563eb; }
* { box-sizing: border-box; }
body { margin:0; font-family: Inter, system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--ink); background:var(--bg); }
header { background: linear-gradient(120deg, #1e3a8a, #2563eb); color:white; padding:28px 40px; }
header h1 { margin:0 0 6px; font-size:24px; font-weight:650; }
header p { margin:0; opacity:.85; font-size:13px; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 40px 60px; }
section { background:white; border:1px solid var(--line); border-radius:12px; padding:20px 24px; margin:18px 0; box-shadow:0 1px 2px rgba(0,0,0,.04); }
h2 { margin:0 0 14px; font-size:17px; font-weight:650; }
h3 { margin:18px 0 8px; font-size:14px; }
.cards { display:grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap:12px; margin-bottom:18px; }
.card { border:1px solid var(--line); border-radius:10px; padding:12px 14px; background:#fbfdff; }
.card .label { font-size:11px; text-transform:uppercase; letter-spacing:.06em; color:var(--muted); }
.card .value { font-size:22px; font-weight:650; margin-top:4px; font-variant-numeric: tabular-nums; }
.card .sub { font-size:12px; color:var(--muted); margin-top:2px; }
table { border-collapse: collapse; width:100%; font-size:13px; font-variant-numeric: tabular-nums; }
th, td { padding:6px 10px; border-bottom:1px solid var(--line); text-align:left; }
th.num { text-align:right; }
thead th { background:#f1f5f9; font-weight:600; }
td.num { text-align:right; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
tr.better td, p.better, td.better { color:#15803d; } tr.worse td, p.worse, td.worse { color:#b91c1c; } td.warn-row { color:#a16207; } td.muted, tr.muted td { color:#6b7280; }
tr.knee td { background:#ecfdf5; font-weight:600; }
.warn { border:2px solid #dc2626; background:#fef2f2; color:#7f1d1d; border-radius:10px; padding:12px 16px; margin-bottom:14px; }
.warn ul { margin:6px 0 0; padding-left:20px; }
.note, .caption { color:var(--muted); font-size:12px; margin:6px 0; }
figure.chart { margin:0; }
details pre { background:#0f172a; color:#e2e8f0; padding:14px; border-radius:8px; overflow:auto; max-height:420px; font-size:12px; }
footer { color:var(--muted); font-size:12px; text-align:center; padding:20px; }
"""


def render(page: Page) -> str:
    from plotly.offline import get_plotlyjs  # noqa: PLC0415 - import cost: plotly only when a report is drawn

    plotly()
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(page.title)}</title><style>{CSS}</style>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
        f"<header><h1>{html.escape(page.title)}</h1><p>{html.escape(page.subtitle)}</p></header>"
        f"<main>{''.join(page.sections)}</main>"
        f"<footer>tokenrace {__version__} · rendered {stamp} from saved files · works offline</footer></body></html>"
    )


def write(inputs: Sequence[Run], out: Path, cost: CostSpec | None = None, sol: SpeedOfLight | None = None) -> Path:
    text = build(inputs, cost, sol)
    out = Path(out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out


# --- the speed of light, from the planner ------------------------------------------------


def planner_bound(hardware: str, model: str | None = None, devices: int | None = None) -> SpeedOfLight:
    """Aggregate decode tokens/s bound at each run's concurrency and prompt/output sizes (tokenrace.plan)."""

    def bound(run: Run) -> float | None:
        name = model or _model_of(run)
        met = run.summary.metrics
        prompt = met.prompt_tokens.mean or 0
        output = met.output_tokens.mean or 0
        load = run.manifest.settings.load
        conc = (load.concurrency if load else None) or 1
        try:
            r = plan(
                name,
                hardware,
                devices=devices,
                concurrency=int(conc),
                context=max(1, int(prompt + output / 2)),
                input_tokens=max(1, int(prompt)),
            )
        except Exception:  # noqa: BLE001 - the bound is context; an unknown model just has none
            return None
        return r.to_dict().get("aggregate_tokens_per_s_bound")

    return bound


def _model_of(run: Run) -> str:
    model_file = run.manifest.engine.model_file if run.manifest.engine else None
    path = model_file.path if model_file is not None else None
    return path or run.manifest.model or ""
