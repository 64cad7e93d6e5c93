"""Quality beside speed: a run's quality pass found next to it, and two runs' passes compared.

A run (or sweep, or profile) directory has a quality pass when it holds quality.json itself
(`tokenrace quality -o RUN`) or in its quality/ subdirectory: what `tokenrace bench
--quality-samples N` writes, and where `tokenrace quality -o RUN/quality` links a later pass to a
run. Two passes over the same items get the paired comparison of `tokenrace quality --compare`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from tokenrace.errors import UsageError
from tokenrace.model.files import ITEMS, QUALITY
from tokenrace.model.metrics import THROUGHPUT, TPOT, TTFT
from tokenrace.quality.models import Accuracy, QualityResult, load_quality
from tokenrace.quality.paired import QualityComparison, Side, accuracy_text, compare_dirs, difference_line
from tokenrace.report.headline import shown
from tokenrace.runs.run import Run
from tokenrace.table import Cell, Column, Table, Tone, num, pct, text, to_markdown

QUALITY_SUBDIR = "quality"


def quality_dir(path: Path) -> Path | None:
    """Where the quality pass of the run at `path` is, or None when it has none."""
    for d in (path, path / QUALITY_SUBDIR):
        if (d / QUALITY).is_file():
            return d
    return None


class QualitySide(BaseModel):
    """One side of a comparison and its quality pass; dumped as the comparison JSON's `quality` entries."""

    name: str
    directory: Path | None
    quality: QualityResult | None

    @property
    def result(self) -> QualityResult | None:
        return self.quality


class QualitySection(BaseModel):
    """A's and B's quality passes and, when both answered the same items, their paired comparison."""

    a: QualitySide
    b: QualitySide
    paired: QualityComparison | None  # paired over the items both sides answered
    note: str | None  # why there is no paired comparison

    @property
    def comparison(self) -> QualityComparison | None:
        return self.paired

    def warnings(self) -> list[str]:
        out = [] if self.paired is None else list(self.paired.warnings)
        return out + ([self.note] if self.note else [])


def _side(run: Run) -> QualitySide:
    d = quality_dir(run.directory)
    return QualitySide(name=run.name, directory=d, quality=load_quality(d) if d is not None else None)


def quality_section(a: Run, b: Run) -> QualitySection | None:
    """A's and B's quality passes, paired when both have one over shared items; None when neither has one."""
    sa, sb = _side(a), _side(b)
    if sa.quality is None and sb.quality is None:
        return None
    if sa.directory is None or sb.directory is None:
        missing = sa.name if sa.directory is None else sb.name
        return _section(sa, sb, None, f"{missing} has no quality pass: accuracy is known for one side only")
    if not (sa.directory / ITEMS).is_file() or not (sb.directory / ITEMS).is_file():
        return _section(sa, sb, None, f"no paired verdict: a quality pass lacks its {ITEMS}")
    try:
        comparison = compare_dirs(sa.directory, sb.directory, (sa.name, sb.name))
    except UsageError as exc:
        return _section(sa, sb, None, f"no paired verdict: {exc}")
    return _section(sa, sb, comparison, None)


def _section(a: QualitySide, b: QualitySide, paired: QualityComparison | None, note: str | None) -> QualitySection:
    return QualitySection(a=a, b=b, paired=paired, note=note)


def _accuracy(a: Accuracy) -> Cell:
    """An accuracy with its Wilson interval and n in one cell: "92.0 % [85.1 %, 96.0 %] n=100"."""
    return text(accuracy_text(a) if a.value is not None else None)


def quality_title(q: QualitySection) -> str:
    return f"Quality: A = {q.a.name}, B = {q.b.name}"


def sides_table(s: QualitySection) -> Table:
    """Each side's quality pass and accuracy with its Wilson interval, over the paired items when paired."""

    def cells(side: QualitySide, paired: Side | None) -> tuple[Cell, Cell, Cell]:
        if paired is not None:
            return _accuracy(paired.accuracy), num(paired.errors), num(paired.accuracy.n)
        if side.quality is None:
            return text("no quality pass"), num(None), num(None)
        o = side.quality.overall
        return _accuracy(o.accuracy), num(o.errors), num(o.accuracy.n)

    c = s.comparison
    ca, cb = cells(s.a, c.a if c else None), cells(s.b, c.b if c else None)
    t = Table(quality_title(s), [Column("", "left"), Column("A"), Column("B")])
    t.add(text("quality pass"), text(_dir(s.a.directory)), text(_dir(s.b.directory)))
    t.add(text("model"), *(text(side.quality.model if side.quality else None) for side in (s.a, s.b)))
    t.add(text("accuracy over the paired items [95 % CI]" if c else "accuracy [95 % CI]"), ca[0], cb[0])
    t.add(text("items judged"), ca[2], cb[2])
    t.add(text("failed requests"), ca[1], cb[1])
    return t


def _dir(d: Path | None) -> str | None:
    return None if d is None else str(d)


def overall_accuracy(side: QualitySide) -> float | None:
    return side.quality.overall.accuracy.value if side.quality else None


def quality_table(r: QualityResult, title: str | None = None) -> Table:
    """A quality pass's accuracy per suite and overall, with Wilson's 95 % interval; failed requests apart."""
    t = Table(
        title,
        [
            Column("suite", "left"),
            Column("accuracy"),
            Column("95 % CI (Wilson)"),
            Column("right"),
            Column("wrong"),
            Column("failed"),
        ],
    )
    for name, score in [*r.suites.items(), ("overall", r.overall)]:
        a = score.accuracy
        ci = None if a.ci_low is None or a.ci_high is None else f"{a.ci_low * 100:.1f} – {a.ci_high * 100:.1f} %"
        t.add(text(name), pct(a.value), text(ci), num(score.right), num(score.wrong), num(score.errors))
    return t


def speed_quality_table(c: QualityComparison) -> Table:
    """Two endpoints' speed and quality side by side, speed first."""
    a, b = c.a, c.b
    t = Table("speed and quality, side by side", [Column("", "left"), Column(f"A: {a.label}"), Column(f"B: {b.label}")])
    t.add(text("endpoint"), text(a.endpoint), text(b.endpoint))
    t.add(text("model"), text(a.model), text(b.model))
    sa, sb = a.speed, b.speed
    for metric, va, vb in ((TTFT, sa.ttft_ms_p50, sb.ttft_ms_p50), (TPOT, sa.tpot_ms_p50, sb.tpot_ms_p50)):
        label = f"{metric.label('p50')} ({metric.displayed.unit})"
        t.add(text(label), shown(metric, va, bare=True), shown(metric, vb, bare=True))
    va, vb = sa.output_tokens_per_s, sb.output_tokens_per_s
    t.add(text(THROUGHPUT.display.unit), shown(THROUGHPUT, va, bare=True), shown(THROUGHPUT, vb, bare=True))
    t.add(text("accuracy [95 % CI]"), _accuracy(a.accuracy), _accuracy(b.accuracy))
    t.add(text("failed requests"), num(a.errors), num(b.errors))
    return t


def paired_counts_table(c: QualityComparison) -> Table:
    """Who is right where over the paired items, and the exact McNemar p-value."""
    p = c.paired
    cols = ("both right", "only A right", "only B right", "both wrong", "exact McNemar p")
    t = Table(None, [Column(h) for h in cols])
    p_value = None if p.p_value is None else f"{p.p_value:.3g}"
    t.add(num(p.both_right), num(p.only_a), num(p.only_b), num(p.both_wrong), text(p_value))
    return t


VERDICT_TONE: dict[str, Tone] = {"B worse": "bad", "B better": "good", "B fails more": "bad", "B fails less": "good"}


def suites_table(c: QualityComparison) -> Table:
    """B - A per suite over the paired items, with its 95 % interval and verdict."""
    t = Table(
        "per suite (B - A)",
        [
            Column("suite", "left"),
            Column("n"),
            Column("only A"),
            Column("only B"),
            Column("B - A"),
            Column("95 % CI"),
            Column("verdict", "left"),
        ],
    )
    for name, s in c.suites.items():
        d = s.difference
        ci = None if d.ci_low is None or d.ci_high is None else f"{d.ci_low * 100:+.1f} .. {d.ci_high * 100:+.1f} pp"
        tone = VERDICT_TONE.get(s.verdict, "")
        t.add(
            text(name),
            num(s.paired.n),
            num(s.paired.only_a),
            num(s.paired.only_b),
            pct(d.value, suffix=" pp", sign=True),
            text(ci),
            text(s.verdict),
            tone=tone,
        )
    return t


def paired_markdown(c: QualityComparison, warnings: bool = True) -> str:
    """The paired part of the Markdown: counts, the difference with its verdict, suites, agreement."""
    ag = c.agreement
    out = [
        to_markdown(paired_counts_table(c)),
        f"**{difference_line(c)}** (CI: {c.difference.method}).",
        "",
        to_markdown(suites_table(c), heading=False),
        f"Agreement over {ag.n} pairs: exact match {pct(ag.exact_match_rate).text}, "
        f"token similarity {pct(ag.token_similarity).text}.",
    ]
    out += [f"\n> WARNING: {w}" for w in c.warnings] if warnings else []
    return "\n".join(out) + "\n"


def comparison_markdown(c: QualityComparison) -> str:
    """`tokenrace quality --compare --markdown`: speed and quality side by side, then the paired part."""
    return to_markdown(speed_quality_table(c), heading=False) + "\n" + paired_markdown(c)


def quality_markdown(q: QualitySection) -> str:
    """A comparison's quality section in Markdown: the sides, the paired part, the note."""
    out = [to_markdown(sides_table(q))]
    if q.comparison is not None:
        out.append(paired_markdown(q.comparison, warnings=False))  # the report lists them
    if q.note:
        out.append(f"> {q.note}\n")
    return "\n".join(out)
