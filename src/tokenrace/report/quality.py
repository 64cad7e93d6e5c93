"""Quality beside speed: a run's quality pass found next to it, and two runs' passes compared.

A run (or sweep, or profile) directory has a quality pass when it holds quality.json itself
(`tokenrace quality -o RUN`) or in its quality/ subdirectory: what `tokenrace bench
--quality-samples N` writes, and where `tokenrace quality -o RUN/quality` links a later pass to a
run. Two passes over the same items get the paired comparison of `tokenrace quality --compare`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenrace.errors import UsageError
from tokenrace.model.files import ITEMS, QUALITY
from tokenrace.quality.models import QualityResult, load_quality
from tokenrace.quality.paired import QualityComparison, accuracy_text, compare_dirs
from tokenrace.runs.run import Run

QUALITY_SUBDIR = "quality"


def quality_dir(path: Path) -> Path | None:
    """Where the quality pass of the run at `path` is, or None when it has none."""
    for d in (path, path / QUALITY_SUBDIR):
        if (d / QUALITY).is_file():
            return d
    return None


@dataclass(slots=True)
class QualitySide:
    name: str
    directory: Path | None
    result: QualityResult | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "directory": None if self.directory is None else str(self.directory),
            "quality": None if self.result is None else self.result.model_dump(mode="json"),
        }


@dataclass(slots=True)
class QualitySection:
    a: QualitySide
    b: QualitySide
    comparison: QualityComparison | None  # paired over the items both sides answered
    note: str | None  # why there is no paired comparison

    def warnings(self) -> list[str]:
        out = [] if self.comparison is None else list(self.comparison.warnings)
        return out + ([self.note] if self.note else [])

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "paired": None if self.comparison is None else self.comparison.model_dump(mode="json"),
            "note": self.note,
        }


def _side(run: Run) -> QualitySide:
    d = quality_dir(run.directory)
    return QualitySide(run.name, d, load_quality(d) if d is not None else None)


def quality_section(a: Run, b: Run) -> QualitySection | None:
    """A's and B's quality passes, paired when both have one over shared items; None when neither has one."""
    sa, sb = _side(a), _side(b)
    if sa.result is None and sb.result is None:
        return None
    if sa.directory is None or sb.directory is None:
        missing = sa.name if sa.directory is None else sb.name
        return QualitySection(sa, sb, None, f"{missing} has no quality pass: accuracy is known for one side only")
    if not (sa.directory / ITEMS).is_file() or not (sb.directory / ITEMS).is_file():
        return QualitySection(sa, sb, None, f"no paired verdict: a quality pass lacks its {ITEMS}")
    try:
        comparison = compare_dirs(sa.directory, sb.directory, (sa.name, sb.name))
    except UsageError as exc:
        return QualitySection(sa, sb, None, f"no paired verdict: {exc}")
    return QualitySection(sa, sb, comparison, None)


def side_rows(s: QualitySection) -> list[tuple[str, str, str]]:
    """(what, A, B): each side's accuracy with its Wilson interval, over the paired items when paired."""

    def model(side: QualitySide) -> str:
        return side.result.model if side.result else "–"

    def cells(side: QualitySide, paired: Any) -> tuple[str, str, str]:
        if paired is not None:
            return accuracy_text(paired.accuracy), str(paired.errors), str(paired.accuracy.n)
        if side.result is None:
            return "no quality pass", "–", "–"
        o = side.result.overall
        return accuracy_text(o.accuracy), str(o.errors), str(o.accuracy.n)

    c = s.comparison
    ca, cb = cells(s.a, c.a if c else None), cells(s.b, c.b if c else None)
    label = "accuracy over the paired items [95 % CI]" if c else "accuracy [95 % CI]"
    return [
        ("quality pass", str(s.a.directory or "–"), str(s.b.directory or "–")),
        ("model", model(s.a), model(s.b)),
        (label, ca[0], cb[0]),
        ("items judged", ca[2], cb[2]),
        ("failed requests", ca[1], cb[1]),
    ]


def overall_accuracy(side: QualitySide) -> float | None:
    return side.result.overall.accuracy.value if side.result else None
