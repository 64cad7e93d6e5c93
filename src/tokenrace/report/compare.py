"""Compare runs: key metrics side by side, B/A ratios with bootstrap CIs, and loud warnings when the
conditions differ. Sweeps are compared step by step. When the runs have quality passes, their
accuracies sit beside the speed (report/quality.py). Rendered as a terminal table, Markdown, CSV or JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel

from tokenrace import stats as bs
from tokenrace import table
from tokenrace.errors import UsageError
from tokenrace.figures.cost import CostSpec, cost_of
from tokenrace.figures.summary import tokens_per_chunk
from tokenrace.model.metrics import (
    ACCEPTANCE_RATE,
    CACHE_HIT_RATE,
    COST_PER_1K_REQUESTS,
    COST_PER_M_OUTPUT,
    DECODE_EFFICIENCY,
    E2E,
    ERROR_RATE,
    FIGURES,
    ITL_CHUNK,
    THROUGHPUT,
    TOKENS_PER_JOULE,
    TPOT,
    TTFT,
    Metric,
    SectionFigure,
)
from tokenrace.model.records import RequestRecord
from tokenrace.model.run import Knee, StepRow
from tokenrace.model.summary import Cost
from tokenrace.report.headline import said, shown
from tokenrace.report.quality import VERDICT_TONE, QualitySection, overall_accuracy, quality_markdown, quality_section
from tokenrace.runs.run import Run
from tokenrace.table import Cell, Column, Table, num, pct, text

# Latencies: lower is better. Values come from each request's record.
LATENCIES: tuple[Metric, ...] = (TTFT, TPOT, ITL_CHUNK, E2E)
STATS = ("p50", "p95")
# A row of a declared figure shows its declaration's label, unit and digits (model/metrics.py);
# its `unit` in CSV and JSON is the one docs/metrics.md writes.
DECLARED: dict[str, Metric | SectionFigure] = {f"{m.name}.{stat}": m for m in LATENCIES for stat in STATS} | {
    f.name: f for f in FIGURES
}
OUTPUT_GAP = 0.10  # warn when measured mean prompt/output lengths differ by more than this
CACHE_GAP = 0.10  # warn when prefix-cache hit rates differ by more than 10 percentage points
# Throughput's interval: a block bootstrap over time slices of the run (see token_blocks).
MAX_BLOCKS, MIN_BLOCKS, BLOCK_E2E = 30, 10, 2.0


@dataclass(slots=True)
class Row:
    metric: str
    label: str
    unit: str
    a: float | None
    b: float | None
    change: float | None  # B/A for ratios; B - A for differences
    ci_low: float | None
    ci_high: float | None
    significant: bool | None  # None: no interval (e.g. one value per run)
    verdict: str
    kind: str = "ratio"  # ratio | difference | value

    @classmethod
    def of(
        cls,
        figure: SectionFigure,
        a: float | None,
        b: float | None,
        change: float | None,
        verdict: str,
        kind: str = "ratio",
        interval: tuple[float | None, float | None, bool | None] = (None, None, None),
    ) -> Row:
        """The row of a declared figure, named, labelled and unit-ed by its declaration;
        `interval`: the change's CI low, high and whether it excludes no change."""
        return cls(figure.name, figure.display.label, figure.unit, a, b, change, *interval, verdict, kind)


@dataclass(slots=True)
class Comparison:
    a: str
    b: str
    a_path: str
    b_path: str
    rows: list[Row]
    warnings: list[str]
    step: str | None = None


@dataclass(slots=True)
class Report:
    comparisons: list[Comparison]
    warnings: list[str] = field(default_factory=list)  # run-level (conditions, knees)
    knees: dict[str, Knee | None] | None = None  # sweeps: each input's knee, by its name
    quality: list[QualitySection] = field(default_factory=list)  # one per B with a quality pass on either side
    confidence: float = bs.CONFIDENCE

    def json_model(self) -> ReportJson:
        """The comparison as `compare --json` prints it."""
        return ReportJson(
            method=CompareMethod(
                ci=(
                    "percentile bootstrap of the ratio B/A over requests (throughput: over time slices); "
                    "none for a percentile that either run has too few requests to bound (order statistics)"
                ),
                resamples=bs.RESAMPLES,
                confidence=self.confidence,
                seed=bs.SEED,
            ),
            warnings=self.warnings,
            knees=self.knees,
            comparisons=self.comparisons,
            quality=self.quality,
        )


class CompareMethod(BaseModel):
    ci: str
    resamples: int
    confidence: float
    seed: int


class ReportJson(BaseModel):
    """`compare --json`: the method, the warnings, the sweeps' knees, every comparison's rows and the
    quality sections."""

    method: CompareMethod
    warnings: list[str]
    knees: dict[str, Knee | None] | None
    comparisons: list[Comparison]
    quality: list[QualitySection]


# --- per-request values ------------------------------------------------------------------------


def values(run: Run, metric: Metric) -> list[float]:
    """The metric's value of each succeeded request, by its declaration's function."""
    if metric.value is None:
        raise ValueError(f"{metric.name} pools several values per request")
    found = (metric.value(r) for r in run.measured_ok())
    return [v for v in found if v is not None]


def gaps(run: Run) -> list[np.ndarray]:
    """Chunk gaps of each succeeded request (ITL), kept per request for the grouped bootstrap."""
    return [np.diff(np.asarray(r.chunk_offsets_ms, dtype=float)) for r in run.measured_ok()]


def failures(run: Run) -> list[float]:
    return [0.0 if r.error_kind is None else 1.0 for r in run.measured()]


# --- rows --------------------------------------------------------------------------------------


def statistics_only(run: Run) -> bool:
    """A run read from a file of statistics without requests (an llm-d Benchmark Report): its rows
    show the file's figures, with no interval."""
    return run.summary.imported is not None and not run.records()


def summary_row(a: Run, b: Run, metric: Metric, stat: str) -> Row:
    """A latency row from the summaries' statistics, no interval: one side has no records."""
    va, vb = (getattr(getattr(r.summary.metrics, metric.name), stat) for r in (a, b))
    ratio = vb / va if va and vb is not None else None
    verdict = _verdict(ratio, None, lower_is_better=True)
    return Row(f"{metric.name}.{stat}", metric.label(stat), metric.unit, va, vb, ratio, None, None, None, verdict)


def latency_row(a: Run, b: Run, metric: Metric, stat: str, confidence: float = bs.CONFIDENCE) -> Row:
    if statistics_only(a) or statistics_only(b):
        return summary_row(a, b, metric, stat)
    if metric is ITL_CHUNK:
        ci = bs.ratio_ci(gaps(a), gaps(b), stat, grouped=True, confidence=confidence)
    else:
        ci = bs.ratio_ci(values(a, metric), values(b, metric), stat, confidence=confidence)
    return Row(
        f"{metric.name}.{stat}",
        metric.label(stat),
        metric.unit,
        ci.a,
        ci.b,
        ci.ratio,
        ci.low,
        ci.high,
        ci.significant,
        _verdict(ci.ratio, ci.significant, lower_is_better=True, needed=ci.needed, stat=stat),
    )


def throughput_row(a: Run, b: Run, confidence: float = bs.CONFIDENCE) -> Row:
    ta = a.summary.throughput.output_tokens_per_s
    tb = b.summary.throughput.output_tokens_per_s
    ratio = tb / ta if ta and tb is not None else None
    low = high = sig = None
    blocks_a, blocks_b = token_blocks(a), token_blocks(b)
    if ratio is not None and blocks_a is not None and blocks_b is not None:
        ci = bs.ratio_ci(blocks_a, blocks_b, "mean", confidence=confidence)
        low, high, sig = ci.low, ci.high, ci.significant
    return Row.of(THROUGHPUT, ta, tb, ratio, _verdict(ratio, sig, lower_is_better=False), interval=(low, high, sig))


def token_blocks(run: Run) -> np.ndarray | None:
    """Output tokens per second in each of up to MAX_BLOCKS equal slices of the measured window.

    Tokens are placed at the arrival of their chunk (a whole non-streamed answer at its end); the
    window is the summary's (first send to last end), so the blocks' mean is the run's throughput.
    Each slice lasts at least BLOCK_E2E median request durations, so that neighbouring slices share
    few requests and can be resampled as roughly independent (a block bootstrap). None when fewer
    than MIN_BLOCKS such slices fit: the run is too short for an interval.
    """
    measured = run.measured()
    ok = [r for r in measured if r.error_kind is None]
    timed = [(r.start_ms, r.start_ms + r.e2e_ms) for r in measured if r.start_ms is not None and r.e2e_ms is not None]
    e2e = [r.e2e_ms for r in ok if r.e2e_ms is not None]
    if not timed or not e2e or np.median(e2e) <= 0:
        return None
    t0, t1 = min(start for start, _ in timed), max(end for _, end in timed)
    n = min(MAX_BLOCKS, int((t1 - t0) / (BLOCK_E2E * float(np.median(e2e)))))
    if n < MIN_BLOCKS:
        return None
    times, tokens = _token_arrivals(ok)
    counts, _ = np.histogram(times, bins=n, range=(t0, t1), weights=tokens)
    return np.asarray(counts / ((t1 - t0) / n / 1000), dtype=float)


def _token_arrivals(ok: list[RequestRecord]) -> tuple[list[float], list[float]]:
    """(ms, tokens) of every chunk of the succeeded requests; a non-streamed answer counts at its end."""
    times: list[float] = []
    tokens: list[float] = []
    for r in ok:
        count = r.output_tokens
        if not count or r.start_ms is None or r.e2e_ms is None:
            continue
        offsets = r.chunk_offsets_ms or [r.e2e_ms]
        times += [r.start_ms + o for o in offsets]
        tokens += tokens_per_chunk(r.chunk_tokens, count, len(offsets))
    return times, tokens


def error_row(a: Run, b: Run, confidence: float = bs.CONFIDENCE) -> Row:
    if statistics_only(a) or statistics_only(b):
        ea, eb = a.summary.error_rate, b.summary.error_rate
        diff = eb - ea if ea is not None and eb is not None else None
        verdict = "—" if diff is None else "same" if diff == 0 else ("B fails more" if diff > 0 else "B fails less")
        return Row.of(ERROR_RATE, ea, eb, diff, verdict, "difference")
    diff, low, high = bs.difference_ci(failures(a), failures(b), confidence=confidence)
    sig = None if low is None or high is None else bool(low > 0 or high < 0)
    if diff is not None and diff == 0 and low == 0 and high == 0:
        sig = False
    verdict = "—" if diff is None else "within noise" if not sig else ("B fails more" if diff > 0 else "B fails less")
    return Row.of(ERROR_RATE, a.summary.error_rate, b.summary.error_rate, diff, verdict, "difference", (low, high, sig))


def efficiency_row(a: Run, b: Run) -> Row | None:
    ea, eb = _efficiency(a), _efficiency(b)
    if ea is None and eb is None:
        return None
    ratio = eb / ea if ea and eb is not None else None
    return Row.of(DECODE_EFFICIENCY, ea, eb, ratio, _verdict(ratio, None, lower_is_better=False))


def _efficiency(run: Run) -> float | None:
    e = run.summary.efficiency
    return e.decode_pct_of_bound if e is not None else None


def _verdict(
    ratio: float | None, significant: bool | None, lower_is_better: bool, needed: int | None = None, stat: str = ""
) -> str:
    if ratio is None:
        return "—"
    better = ratio < 1 if lower_is_better else ratio > 1
    word = "better" if better else "worse"
    if significant is None and needed is not None:
        return f"unbounded: a {stat} needs {needed} requests a run"
    if significant is None:
        return f"B {word} (no CI)" if ratio != 1 else "same"
    return f"B {word}" if significant else "within noise"


ExtraRows = Callable[[Run, Run], list[Row]]


def cost_rows(cost: CostSpec | None) -> ExtraRows:
    """$ per million output tokens and per 1k requests for both runs (lower is better; no CI)."""

    def rows(a: Run, b: Run) -> list[Row]:
        ca, cb = (_cost(r, cost) for r in (a, b))
        out = []
        for f in (COST_PER_M_OUTPUT, COST_PER_1K_REQUESTS):
            key = f.name.removeprefix("cost.")
            va, vb = (None if c is None else getattr(c, key) for c in (ca, cb))
            if va is None and vb is None:
                continue
            ratio = vb / va if va and vb is not None else None
            out.append(Row.of(f, va, vb, ratio, _verdict(ratio, None, True)))
        return out

    return rows


def _cost(run: Run, cost: CostSpec | None) -> Cost | None:
    return cost_of(run.summary, run.manifest.provider, run.manifest.model, cost)


def cache_row(a: Run, b: Run) -> Row | None:
    """The prefix cache's share of prompt tokens (no CI: a ratio of sums; the difference is what matters)."""
    ha, hb = _hit_rate(a), _hit_rate(b)
    if ha is None and hb is None:
        return None
    diff = hb - ha if ha is not None and hb is not None else None
    return Row.of(CACHE_HIT_RATE, ha, hb, diff, "—", "difference")


def acceptance_row(a: Run, b: Run) -> Row | None:
    """The engine's speculative-decoding acceptance (accepted ÷ draft tokens), shown beside TPOT:
    a TPOT gain that comes with a higher acceptance came from the content or the drafter."""
    pa, pb = (r.summary.speculative.acceptance_rate if r.summary.speculative else None for r in (a, b))
    if pa is None and pb is None:
        return None
    diff = pb - pa if pa is not None and pb is not None else None
    return Row.of(ACCEPTANCE_RATE, pa, pb, diff, "—", "difference")


def energy_row(a: Run, b: Run) -> Row | None:
    """Output tokens per joule of GPU energy (higher is better; no CI: one energy reading per run)."""
    ea, eb = (r.summary.energy.output_tokens_per_joule if r.summary.energy else None for r in (a, b))
    if ea is None and eb is None:
        return None
    ratio = eb / ea if ea and eb is not None else None
    verdict = _verdict(ratio, None, lower_is_better=False)
    return Row.of(TOKENS_PER_JOULE, ea, eb, ratio, verdict)


def _hit_rate(run: Run) -> float | None:
    c = run.summary.cache
    return c.hit_rate if c is not None else None


def accuracy_row(q: QualitySection) -> Row:
    """The quality passes' accuracy, B - A: paired (Newcombe's interval, the paired verdict) when both
    sides answered the same items, else each side's own accuracy with no interval."""
    c = q.comparison
    if c is None:
        ha, hb = overall_accuracy(q.a), overall_accuracy(q.b)
        diff = hb - ha if ha is not None and hb is not None else None
        return Row(
            "quality.accuracy", "accuracy", "fraction", ha, hb, diff, None, None, None, "not paired", "difference"
        )
    d = c.difference
    verdict = "—" if c.verdict == "no data" else c.verdict
    significant = None if c.verdict == "no data" else c.verdict != "within noise"
    return Row(
        "quality.accuracy",
        "accuracy (paired)",
        "fraction",
        c.a.accuracy.value,
        c.b.accuracy.value,
        d.value,
        d.ci_low,
        d.ci_high,
        significant,
        verdict,
        "difference",
    )


def compare_runs(
    a: Run, b: Run, step: str | None = None, extra: ExtraRows | None = None, confidence: float = bs.CONFIDENCE
) -> Comparison:
    rows = [latency_row(a, b, metric, stat, confidence) for metric in LATENCIES for stat in STATS]
    accepted = acceptance_row(a, b)
    if accepted is not None:  # beside TPOT, which speculative decoding moves
        after_tpot = max(i for i, r in enumerate(rows) if r.metric.startswith("tpot_ms")) + 1
        rows.insert(after_tpot, accepted)
    rows += [throughput_row(a, b, confidence), error_row(a, b, confidence)]
    energy = energy_row(a, b)
    if energy is not None:
        rows.append(energy)
    cache = cache_row(a, b)
    if cache is not None:
        rows.append(cache)
    eff = efficiency_row(a, b)
    if eff is not None:
        rows.append(eff)
    if extra is not None:
        rows += extra(a, b)
    return Comparison(a.name, b.name, str(a.directory), str(b.directory), rows, condition_warnings(a, b), step)


# --- conditions --------------------------------------------------------------------------------


def _setting(run: Run, *path: str) -> Any:
    node: Any = run.manifest.settings
    for p in path:
        node = getattr(node, p, None) if isinstance(node, BaseModel) else None
    return node


CONDITIONS: tuple[tuple[str, Callable[[Run], Any]], ...] = (
    ("model", lambda r: r.manifest.model),
    ("prompt set", lambda r: r.manifest.prompts.name),
    ("input tokens setting", lambda r: _setting(r, "prompts", "input_tokens")),
    ("output tokens setting", lambda r: _setting(r, "prompts", "output_tokens")),
    ("max_tokens", lambda r: _setting(r, "request", "max_tokens")),
    ("concurrency", lambda r: None if _setting(r, "load", "rate") is not None else _setting(r, "load", "concurrency")),
    ("request rate", lambda r: _setting(r, "load", "rate")),
    ("streaming", lambda r: _setting(r, "request", "stream")),
    ("API", lambda r: _setting(r, "request", "api")),
    ("ignore_eos", lambda r: bool((_setting(r, "request", "extra_body") or {}).get("ignore_eos"))),
    ("cache busting", lambda r: r.manifest.workload.cache_bust if r.manifest.workload else None),
    ("workload", lambda r: r.manifest.workload.kind if r.manifest.workload else None),
    ("tool version", lambda r: f"{r.manifest.tool} {r.manifest.version}"),
)


def condition_warnings(a: Run, b: Run) -> list[str]:
    out = []
    for name, get in CONDITIONS:
        va, vb = _listify(get(a)), _listify(get(b))
        if va != vb:
            out.append(f"{name} differs: {_show(va)} (A) vs {_show(vb)} (B)")
    for key, name in (("prompt_tokens", "measured prompt length"), ("output_tokens", "measured output length")):
        ma, mb = (getattr(r.summary.metrics, key).mean for r in (a, b))
        if ma and mb and abs(mb / ma - 1) > OUTPUT_GAP:
            out.append(f"{name} differs: mean {ma:.1f} (A) vs {mb:.1f} (B) tokens")
    ha, hb = _hit_rate(a), _hit_rate(b)
    hit_rate = CACHE_HIT_RATE.display.label
    if ha is not None and hb is not None and abs(hb - ha) > CACHE_GAP:
        out.append(
            f"{hit_rate} differs: {said(CACHE_HIT_RATE, ha)} (A) vs {said(CACHE_HIT_RATE, hb)} (B) of prompt tokens; "
            "TTFT compares cache hits as much as prefill (bust prompts with --cache-bust on both)"
        )
    elif (ha is None) != (hb is None):
        known = "A" if ha is not None else "B"
        out.append(f"{hit_rate} is known for {known} only: TTFT may include cache hits on one side")
    return out


def _listify(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _show(v: Any) -> str:
    return "unknown" if v is None else str(v)


# --- whole inputs --------------------------------------------------------------------------------


def compare(runs: list[Run], extra: ExtraRows | None = None, confidence: float = bs.CONFIDENCE) -> Report:
    """The first input is the baseline (A); every other is compared against it."""
    if len(runs) < 2:
        raise UsageError("compare needs at least two runs")
    base = runs[0]
    kinds = {r.kind for r in runs}
    named = len(runs) > 2  # with several B's, say which pair each warning is about

    def prefix(other: Run) -> str:
        return f"{other.name} vs {base.name}: " if named else ""

    if kinds == {"run"}:
        report = Report([], confidence=confidence)
        for other in runs[1:]:
            c = compare_runs(base, other, extra=extra, confidence=confidence)
            report.comparisons.append(c)
            report.warnings += _lift([c], prefix(other))
            q = _add_quality(report, base, other, prefix(other))
            if q is not None:
                c.rows.append(accuracy_row(q))
        return report
    if kinds <= {"sweep", "profile"}:
        report = Report([], confidence=confidence)
        for other in runs[1:]:
            notes: list[str] = []
            comps = compare_sweeps(base, other, notes, extra, confidence)
            report.comparisons += comps
            report.warnings += _lift(comps, prefix(other)) + [prefix(other) + n for n in notes]
            _add_quality(report, base, other, prefix(other))
        report.knees = {r.name: r.knee for r in runs}
        return report
    raise UsageError("compare runs with runs, or sweeps with sweeps (compare one step of a sweep by its directory)")


def _add_quality(report: Report, a: Run, b: Run, prefix: str) -> QualitySection | None:
    """The quality section of A vs B, when either has a quality pass; its warnings join the report's."""
    q = quality_section(a, b)
    if q is not None:
        report.quality.append(q)
        report.warnings += [f"{prefix}quality: {w}" for w in q.warnings()]
    return q


def _step_key(run: Run, row: StepRow) -> float | str | None:
    if run.sweep_kind == "input_tokens":
        return row.value
    if run.sweep_kind == "content":  # two content sweeps pair kind with kind
        return row.content or row.step
    return row.rate if row.rate is not None else row.concurrency


def compare_sweeps(
    a: Run, b: Run, warnings: list[str], extra: ExtraRows | None, confidence: float = bs.CONFIDENCE
) -> list[Comparison]:
    if a.sweep_kind != b.sweep_kind:
        warnings.append(f"sweep kinds differ: {a.sweep_kind} (A) vs {b.sweep_kind} (B)")
    runs_a, runs_b = dict(a.steps), dict(b.steps)
    by_key_b = {_step_key(b, row): row.step for row in b.sweep.steps if row.step in runs_b}
    out = []
    for row in a.sweep.steps:
        match = by_key_b.get(_step_key(a, row))
        if row.step in runs_a and match is not None:
            out.append(
                compare_runs(
                    runs_a[row.step], runs_b[match], step=f"{row.step} vs {match}", extra=extra, confidence=confidence
                )
            )
    if not out:
        raise UsageError("the sweeps share no step (same concurrency, rate or prompt size)")
    if len(out) < max(len(runs_a), len(runs_b)):
        warnings.append(f"only {len(out)} steps match between {a.name} and {b.name}; the rest are left out")
    return out


def _lift(comps: list[Comparison], prefix: str = "") -> list[str]:
    """Condition warnings, each said once."""
    seen: list[str] = []
    for c in comps:
        for w in c.warnings:
            if prefix + w not in seen:
                seen.append(prefix + w)
    return seen


# --- rendering -----------------------------------------------------------------------------------


def value_cell(r: Row, v: float | None) -> Cell:
    """A side's value: a declared figure's as its declaration shows it, the unit in its own column."""
    declared = DECLARED.get(r.metric)
    if declared is not None:
        return shown(declared, v, bare=True)
    if v is None:
        return num(None)
    if r.unit == "fraction":
        return pct(v, 2)
    if r.unit == "$":
        return num(float(v), 4)
    return num(float(v), 2 if abs(v) < 100 else 1)


def unit_text(r: Row) -> str:
    """The unit column: a declared figure's display unit ("output tok/s"), a fraction's "%"."""
    declared = DECLARED.get(r.metric)
    if declared is not None:
        return declared.displayed.unit
    return "%" if r.unit == "fraction" else r.unit


def change_cell(r: Row) -> Cell:
    if r.kind == "difference":
        return pct(r.change, 2, suffix=" pp", sign=True)
    return Cell(r.change, 3, prefix="×")


def ci_text(r: Row) -> str | None:
    if r.ci_low is None or r.ci_high is None:
        return None
    if r.kind == "difference":
        return f"[{r.ci_low * 100:+.2f}, {r.ci_high * 100:+.2f}] pp"
    return f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"


def title(c: Comparison) -> str:
    return (f"step {c.step}: " if c.step else "") + f"A = {c.a}, B = {c.b}"


def compare_table(c: Comparison) -> Table:
    """One comparison (two runs, or one step of two sweeps): A, B, B/A (or B - A) with its 95 % CI."""
    t = Table(
        title(c),
        [
            Column("metric", "left"),
            Column("unit", "left"),
            Column("A"),
            Column("B"),
            Column("B/A"),
            Column("95% CI"),
            Column("verdict", "left"),
        ],
    )
    for r in c.rows:
        t.add(
            text(r.label),
            text(unit_text(r)),
            value_cell(r, r.a),
            value_cell(r, r.b),
            change_cell(r),
            text(ci_text(r)),
            text(r.verdict),
            tone=VERDICT_TONE.get(r.verdict, ""),
        )
    return t


def compare_data_table(report: Report) -> Table:
    """Every comparison's rows, one per metric, unrounded: the CSV export."""
    names = ["step", "a", "b", "metric", "unit", "a_value", "b_value", "change", "change_kind"]
    t = Table(None, [Column(n) for n in (*names, "ci_low", "ci_high", "significant", "verdict")])
    for c in report.comparisons:
        for r in c.rows:
            t.add(
                *map(text, (c.step or "", c.a, c.b, r.metric, r.unit)),
                *map(num, (r.a, r.b, r.change)),
                text(r.kind),
                num(r.ci_low),
                num(r.ci_high),
                text(None if r.significant is None else str(r.significant)),
                text(r.verdict),
            )
    return t


def to_markdown(report: Report) -> str:
    out = []
    for w in report.warnings:
        out.append(f"> **Warning:** {w}")
    if report.warnings:
        out.append("")
    out += [table.to_markdown(compare_table(c)) for c in report.comparisons]
    out += [quality_markdown(q) for q in report.quality]
    return "\n".join(out)


def to_csv(report: Report) -> str:
    return table.to_csv(compare_data_table(report))
