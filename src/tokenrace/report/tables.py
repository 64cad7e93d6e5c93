"""The tables of a run, a sweep and a profile, declared once (tokenrace/table.py renders them for the
terminal, HTML, Markdown and CSV), and the text lines shown under them.

The `*_view` functions put a table and its lines together for the terminal, as one rich renderable:
report/ builds what is shown, and cli/ prints it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group, RenderableType
from rich.text import Text

from tokenrace.client.request import POOLING_APIS
from tokenrace.figures.cost import CostSpec, cost_of
from tokenrace.model.engine import ModelFile, ProfileEngine
from tokenrace.model.manifest import Manifest
from tokenrace.model.metrics import (
    ACCEPTANCE_RATE,
    AGGREGATE_EFFICIENCY,
    CACHE_HIT_RATE,
    COST_PER_M_OUTPUT,
    DECODE_EFFICIENCY,
    E2E,
    ERROR_RATE,
    GOODPUT,
    GOODPUT_SHARE,
    INPUT_TOKENS_PER_S,
    METRICS,
    SCHEMA_VALID_RATE,
    THROUGHPUT,
    TOKENS_PER_JOULE,
    TPOT,
    TTFT,
    TTFT_EFFICIENCY,
    Metric,
    SectionFigure,
)
from tokenrace.model.run import ProfileFile, StepRow, SweepFile
from tokenrace.model.settings import LoadSettings, RequestSettings
from tokenrace.model.summary import Cost, Summary, TurnStats
from tokenrace.report.headline import named, run_headline, said, shown, sweep_headline, to_lines
from tokenrace.report.reference import endpoints_table, reference_tables
from tokenrace.report.sla import sla_lines, sla_table
from tokenrace.runs.run import Run
from tokenrace.table import BLANK, Cell, Column, Row, Table, fmt, num, pct, text, to_rich

# The summary table's rows, from the metrics' declarations (model/metrics.py): (label, field, unit, digits).
ROWS = tuple((m.display.label, m.name, m.display.unit, m.display.digits) for m in METRICS if m.display)
COLS = ("count", "mean", "p50", "p90", "p95", "p99", "max")


def summary_table(summary: Summary, title: str | None = None) -> Table:
    """Each latency and size statistic of the run, one row per metric it measured."""
    t = Table(title, [Column("metric", "left"), Column("unit", "left"), *(Column(c) for c in COLS)])
    for label, key, unit, digits in ROWS:
        m = getattr(summary.metrics, key)
        if m.count:
            t.add(text(label), text(unit), *(num(getattr(m, c), 0 if c == "count" else digits) for c in COLS))
    return t


def headline_lines(summary: Summary, cost: Cost | None = None, bound: float | None = None) -> list[str]:
    """The lines under the summary table: the run's headline (report/headline.py, the HTML report's
    key numbers), then what else the run recorded: rate, cold request, token sources, turns, images,
    tools, efficiency, resources, warnings, goodput, probes and why it stopped."""
    return to_lines(run_headline(summary, cost, bound)) + more_lines(summary)


def more_lines(summary: Summary) -> list[str]:
    """What the run recorded besides its headline figures."""
    lines = []
    if summary.offered_rate is not None:
        lines.append(
            f"rate: offered {fmt(summary.offered_rate, 2)} req/s, achieved {fmt(summary.achieved_rate, 2)} req/s"
        )
    cold = summary.cold
    if cold:
        lines.append(
            f"cold (first request): {TTFT.displayed.label} {said(TTFT, cold.ttft_ms)}, "
            f"{E2E.displayed.label} {said(E2E, cold.e2e_ms)}"
        )
    src = summary.token_count_source
    lines.append(
        f"token counts from: output={src.output_tokens}, prompt={src.prompt_tokens}"
        + (" (approximate: counted chunks)" if src.approximate else "")
    )
    reasons = sorted(set((summary.not_measured or {}).values()))
    lines.extend(f"no TTFT, TPOT or ITL: {why}" for why in reasons)
    lines.extend(turn_lines(summary.by_turn))
    lines.extend(structured_lines(summary))
    eff = summary.efficiency
    if eff is not None and not eff.error:
        lines.append(
            f"speed of light ({eff.devices} x {eff.hardware}, {eff.model} {eff.precision}): "
            f"{named(DECODE_EFFICIENCY, eff.decode_pct_of_bound)} "
            f"({fmt(eff.decode_tokens_per_s_bound)} tok/s per stream), "
            f"{named(TTFT_EFFICIENCY, eff.ttft_pct_of_bound)} ({fmt(eff.ttft_ms_bound, 2)} ms), "
            f"{named(AGGREGATE_EFFICIENCY, eff.aggregate_pct_of_bound)}"
        )
    if summary.resources:
        from tokenrace.monitor.render import summary_lines  # noqa: PLC0415 - import cost: the monitor package only for a run with resource figures

        lines.extend(summary_lines(summary.resources))
    # The monitor's advice sits under the resource figures it reads; the rest close the list.
    resource = [w for w in summary.warnings if w.code.startswith("resources.")]
    lines.extend(f"warning: {w.message}" for w in resource)
    lines.extend(f"drift: {f}" for f in (summary.drift.findings if summary.drift else []))
    lines.extend(f"warning: {w.message}" for w in summary.warnings if w not in resource)
    g = summary.goodput
    if g is not None:
        lines.append(
            f"{GOODPUT.display.label}: {said(GOODPUT, g.requests_per_s)}, "
            f"{said(GOODPUT_SHARE, g.fraction)} {GOODPUT_SHARE.display.label} {g.slo}"
        )
    probes = summary.probes
    if probes is not None:
        t = probes.ttft_ms
        lines.append(
            f"probes ({fmt(probes.rate, 2)}/s beside the load, one output token): {probes.succeeded}/"
            f"{probes.requests} ok, {TTFT.label('p50')} {said(TTFT, t.p50)}, p95 {said(TTFT, t.p95)}, "
            f"max {said(TTFT, t.max)}"
        )
    if summary.stopped is not None:
        lines.append(summary.stopped.message)
    return lines


def structured_lines(summary: Summary) -> list[str]:
    """Images (TTFT by image count, and with minus without), tool calls and schema validity."""
    out: list[str] = []
    im = summary.images
    if im is not None:
        by = ", ".join(f"{g.images} image(s) {said(TTFT, g.ttft_ms.p50)} ({g.requests} req)" for g in im.by_count)
        out.append(
            f"images: {im.images} in {im.requests_with_images} requests; {TTFT.label('p50')} by image count: {by}"
        )
        d = im.ttft_difference_ms
        if d is not None:
            out.append(
                f"images: {TTFT.label('p50')} with − without = {fmt(d.difference, 2)} ms "
                f"(95 % CI {fmt(d.ci_low, 2)} to {fmt(d.ci_high, 2)})"
            )
    t = summary.tools
    if t is not None:
        out.append(
            f"tools: {t.tool_calls} calls in {t.requests_with_tool_calls}/{t.requests} requests, "
            f"time to the first tool delta p50 {fmt(t.ttft_tool_ms.p50)} ms"
        )
    so = summary.structured_output
    if so is not None:
        rate = "n/a (nothing checked)" if so.valid_rate is None else shown(SCHEMA_VALID_RATE, so.valid_rate).text
        out.append(f"{SCHEMA_VALID_RATE.display.label}: {rate} valid ({so.valid} of {so.checked} answers checked)")
    return out


def turn_lines(by_turn: list[TurnStats] | None) -> list[str]:
    if not by_turn:
        return []
    return [
        f"turn {t.turn}: {t.requests} requests, {TTFT.label('p50')} {said(TTFT, t.ttft_ms.p50)}, "
        f"prompt {fmt(t.prompt_tokens.mean, 0)} tok, {CACHE_HIT_RATE.display.header} {said(CACHE_HIT_RATE, t.cache_hit_rate)}"
        for t in by_turn
    ]


def _vs(metric: Metric, server: float | None, client: float | None) -> str:
    """The engine's figure against the client's: "TTFT 12.0 vs 12.5 ms"."""
    return f"{metric.displayed.label} {shown(metric, server, bare=True).text} vs {said(metric, client)}"


def _gb(bytes_per_s: float | None) -> float | None:
    return None if bytes_per_s is None else bytes_per_s / 1e9  # unknown stays "—", not 0


def lines_view(lines: list[str]) -> list[Text]:
    """Lines of text (rich markup allowed) as the terminal shows them, numbers not highlighted."""
    return [Text.from_markup(line) for line in lines]


def summary_view(summary: Summary, title: str | None = None, cost: Cost | None = None) -> Group:
    """A run for the terminal: the summary table, its headline, then the reference tables with their notes."""
    parts: list[RenderableType] = [to_rich(summary_table(summary, title)), *lines_view(headline_lines(summary, cost))]
    for table in reference_tables(summary.reference):
        parts += [to_rich(table), *lines_view(table.notes)]
    return Group(*parts)


@dataclass(frozen=True, slots=True)
class StepColumn:
    """A step table's column: its header and the cell it shows for a step; an optional column is
    left out when no step has a value for it. One column = one line."""

    column: Column
    cell: Callable[[StepRow], Cell]
    optional: bool = False


def _col(label: str, cell: Callable[[StepRow], Cell], optional: bool = False) -> StepColumn:
    return StepColumn(Column(label), cell, optional)


def _stats(metric: Metric, *stats: str) -> list[StepColumn]:
    """A metric's statistics side by side, as its declaration shows them (model/metrics.py): the
    first headed by its label ("TTFT p50"), the rest by the statistic alone ("p95")."""

    def column(stat: str, header: str) -> StepColumn:
        return _col(header, lambda r: shown(metric, getattr(getattr(r, metric.name), stat), bare=True))

    return [column(stat, metric.label(stat) if i == 0 else stat) for i, stat in enumerate(stats)]


def _figure(figure: SectionFigure, value: Callable[[StepRow], float | None], optional: bool = False) -> StepColumn:
    """A section's figure, headed and shown as its declaration says ("tok/J", two digits)."""
    return _col(figure.display.header, lambda r: shown(figure, value(r), bare=True), optional)


PROFILE_COLUMNS = [
    *_stats(TTFT, "p50", "p95", "max"),
    *_stats(TPOT, "p50", "p95", "max"),
    _figure(THROUGHPUT, lambda r: r.output_tokens_per_s),
    _col("req/s", lambda r: num(r.requests_per_s, 2)),
    _figure(CACHE_HIT_RATE, lambda r: r.cache_hit_rate),
]
# Embeddings and rerank answer in one body: the latency instead of TTFT and TPOT, input tokens/s.
POOLING_COLUMNS = [
    *_stats(E2E, "p50", "p95", "max"),
    _figure(INPUT_TOKENS_PER_S, lambda r: r.input_tokens_per_s),
    _col("req/s", lambda r: num(r.requests_per_s, 2)),
]
SWEEP_COLUMNS = [
    *_stats(TTFT, "p50", "p95"),
    *_stats(TPOT, "p50", "p95"),
    # Beside TPOT, which speculative decoding moves: the engine's acceptance (accepted ÷ draft tokens).
    _figure(ACCEPTANCE_RATE, lambda r: r.acceptance_rate, optional=True),
    *_stats(E2E, "p95"),
    _figure(THROUGHPUT, lambda r: r.throughput_tokens_per_s),
    _col("gain", lambda r: pct(r.gain, sign=True)),
    _figure(ERROR_RATE, lambda r: r.error_rate),
    # The prefix cache's share of the step's prompt tokens: a step served from the cache has a
    # lower TTFT for a reason other than load.
    _figure(CACHE_HIT_RATE, lambda r: r.cache_hit_rate),
    _figure(TOKENS_PER_JOULE, lambda r: r.output_tokens_per_joule, optional=True),
    _figure(COST_PER_M_OUTPUT, lambda r: r.cost.usd_per_million_output_tokens if r.cost else None, optional=True),
]
STEP = StepColumn(Column("step", "left"), lambda r: text(r.step))
OK = _col("ok", lambda r: text(f"{r.requests.succeeded}/{r.requests.total}"))


def _table(title: str, columns: list[StepColumn], steps: list[StepRow]) -> Table:
    shown = [c for c in columns if not c.optional or any(c.cell(row).value is not None for row in steps)]
    t = Table(title, [c.column for c in shown])
    for row in steps:
        t.add(*(c.cell(row) for c in shown), tone="best" if row.knee else "")
    return t


def profile_table(summary: ProfileFile) -> Table:
    """One row per step of the embedded profile (or any ramp): p50/p95/max of TTFT and TPOT; for
    embeddings and rerank steps, of the latency instead. The cold request's TTFT (E2E) first."""
    pooling = _pooling_steps(summary)
    columns = POOLING_COLUMNS if pooling else PROFILE_COLUMNS
    conc = _col("conc.", lambda r: num(r.concurrency))
    t = _table("steps", [STEP, conc, OK, *columns], summary.steps)
    cold = summary.cold
    if cold:
        ok = "1/1" if not cold.error_kind else "0/1"
        first = shown(E2E, cold.e2e_ms, bare=True) if pooling else shown(TTFT, cold.ttft_ms, bare=True)
        t.rows.insert(0, Row([text("cold"), num(1), text(ok), first, *[BLANK] * (len(columns) - 1)]))
    return t


def _pooling_steps(summary: ProfileFile) -> bool:
    return any(row.api in POOLING_APIS for row in summary.steps)


SWEEP_LOAD = {
    "concurrency": "conc.",
    "rate": "rate",
    "goodput": "rate",
    "input_tokens": "prompt tok",
    "content": "conc.",
    "sla": "load",
}


def sweep_table(s: SweepFile) -> Table:
    """One row per step of a sweep: latency quantiles, throughput, its gain on the step before, errors,
    the prefix cache's share, what is known of speculation, energy and cost, and the knee,
    saturation or SLO mark."""
    kind = s.sweep or "concurrency"
    load = _col(SWEEP_LOAD[kind], lambda r: _load_cell(kind, r))
    mark = StepColumn(Column("", "left"), _mark)
    return _table(f"{kind} sweep: {fmt(s.model)} @ {fmt(s.endpoint)}", [STEP, load, OK, *SWEEP_COLUMNS, mark], s.steps)


def _load_cell(kind: str, row: StepRow) -> Cell:
    if kind in ("concurrency", "content") or (kind == "sla" and row.rate is None):
        return num(row.concurrency)
    if kind == "input_tokens":
        return num(row.prompt_tokens_mean, 0)
    return num(row.rate, 2)


def _mark(row: StepRow) -> Cell:
    if row.knee:
        return text("◀ knee", "best")
    if row.failing:
        return text("errors", "bad")
    if row.saturated:
        return text("saturated", "warn")
    if row.passed is not None:
        unclear = "" if row.certain in (True, None) else " (unclear)"
        return text("meets SLO" + unclear, "good") if row.passed else text("misses SLO" + unclear, "bad")
    return BLANK


def sweep_lines(s: SweepFile) -> list[str]:
    """The lines under a sweep's step table: its headline (the HTML report's key numbers)."""
    return to_lines(sweep_headline(s))


def steps_table(s: SweepFile | ProfileFile) -> Table:
    """The step table of a sweep or of an embedded profile, as the terminal and the HTML show it."""
    return sweep_table(s) if isinstance(s, SweepFile) else profile_table(s)


def run_table(run: Run, cost: CostSpec | None = None) -> Table:
    """The main table of a saved run: its summary, its sweep's steps (priced) or its profile's steps."""
    if run.kind == "run":
        m = run.manifest
        return summary_table(run.summary, f"{fmt(m.model)} @ {fmt(m.endpoint)}")
    return steps_table(with_costs(run, cost))


def with_costs(run: Run, cost: CostSpec | None) -> SweepFile | ProfileFile:
    """The run's sweep (or profile) file with each step's cost filled in from its summary."""
    data = run.sweep.model_copy(deep=True)
    steps = dict(run.steps)
    for row in data.steps:
        if row.step in steps:
            step = steps[row.step]
            row.cost = cost_of(step.summary, step.manifest.provider, step.manifest.model, cost)
    return data


def sweep_view(s: SweepFile) -> Group:
    """A sweep for the terminal: its steps, the SLA search's table when it ran one, the lines, then
    the endpoints of every step when the steps name them."""
    parts: list[RenderableType] = [to_rich(sweep_table(s)), *((to_rich(sla_table(s)),) if s.sla else ())]
    parts += lines_view(sweep_lines(s) + sla_lines(s))
    if any(r.endpoints is not None for r in s.steps):
        table = endpoints_table([(r.step, r) for r in s.steps])
        parts += [to_rich(table), *lines_view(table.notes)]
    return Group(*parts)


def _model_name(summary: ProfileFile, path: str | None) -> str:
    return Path(path).name if path else fmt(summary.model)


def profile_view(summary: ProfileFile) -> Group:
    """A profile for the terminal: the engine and model line, the steps, then the lines under them."""
    out: list[str] = []
    eng = summary.engine or ProfileEngine()
    mf = eng.model_file or ModelFile()
    size = mf.file_size_bytes
    out.append(
        f"[bold]{fmt(eng.engine)}[/bold] {eng.version or ''} | model {_model_name(summary, mf.path)} "
        f"({mf.quantization or 'quantization unknown'}, {fmt(None if size is None else size / 1e6)} MB) "
        f"@ {fmt(summary.endpoint)} | threads {fmt(eng.threads)}, "
        f"slots {fmt(eng.parallel_slots)} | times in ms"
    )
    table = to_rich(profile_table(summary))
    out += to_lines(sweep_headline(summary))
    bust = summary.cache_bust
    if bust is not None and not _pooling_steps(summary):
        out.append(
            "prompts: built-in, busted (a unique prefix per request, so the prefix cache cannot serve them and "
            "the steps compare prefill with prefill; --no-cache-bust allows hits)"
            if bust
            else "prompts: built-in, not busted: the prefix cache serves repeated prompts (see the cached column)"
        )
    cold, warm = summary.cold, summary.warm.ttft_ms if summary.warm else None
    if cold is not None and cold.ttft_ms is not None and warm is not None and warm.p50 is not None:
        out.append(
            f"cold vs warm {TTFT.displayed.label}: {said(TTFT, cold.ttft_ms)} first request, "
            f"{said(TTFT, warm.p50)} warm p50 (concurrency 1)"
        )
    for row in summary.steps:
        eff = row.efficiency
        if eff is not None and not eff.error:
            out.append(
                f"{row.step}: {named(DECODE_EFFICIENCY, eff.decode_pct_of_bound)} "
                f"({fmt(eff.decode_tokens_per_s_bound)} tok/s/stream, {eff.hardware}, "
                f"{fmt(_gb(eff.hardware_bandwidth_bytes_per_s))} GB/s), "
                f"{named(AGGREGATE_EFFICIENCY, eff.aggregate_pct_of_bound)}"
            )
            out += [f"[yellow]warning[/yellow]: {w.message}" for w in eff.warnings]
        svc = row.server_vs_client
        if svc:
            out.append(
                f"{row.step}: engine clock vs client: {_vs(TTFT, svc.ttft_ms.server_p50, svc.ttft_ms.client_p50)}, "
                f"{_vs(TPOT, svc.tpot_ms.server_p50, svc.tpot_ms.client_p50)} (p50)"
            )
    head, *rest = lines_view(out)
    return Group(head, table, *rest)


# --- a run's manifest ------------------------------------------------------------


def manifest_table(m: Manifest, title: str | None = "manifest") -> Table:
    """What a run was, from its manifest: where, what, by which tool and when, at what load and with
    which prompts and request settings, by which command. Facts the manifest does not hold are left out."""
    load, req = m.settings.load or LoadSettings(), m.settings.request or RequestSettings()
    rate, concurrency = load.rate, load.concurrency
    shape = f"rate {fmt(rate, 2)} req/s" if rate is not None else None
    shape = shape or (f"concurrency {concurrency}" if concurrency is not None else None)
    facts = (
        ("endpoint", m.endpoint),
        ("model", m.model),
        ("measured by", f"{m.tool} {m.version or 'version unknown'}"),
        ("started", m.started_at),
        ("finished", m.finished_at),
        ("load", shape),
        ("prompts", m.prompts.name),
        ("max_tokens", req.max_tokens),
        ("stream", req.stream),
        ("command", " ".join(str(a) for a in m.command or [])),
        ("imported from", m.imported.source_file if m.imported is not None else None),
    )
    t = Table(title, [Column("field", "left"), Column("value", "left")])
    for label, value in facts:
        if value is not None and value != "":
            t.add(text(label), text(str(value)))
    return t
