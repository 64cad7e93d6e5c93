"""Paired comparison of two quality runs over the same items: who is right where, whether the
difference is more than noise, and how alike the two sides' answers are."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from tokenrace.errors import UsageError
from tokenrace.model.files import ITEMS, QUALITY_SCHEMA_VERSION
from tokenrace.quality.models import Accuracy, EngineInfo, ItemResult, QualityResult, Speed, load_quality, read_items
from tokenrace.quality.scoring import score, speed
from tokenrace.stats import mcnemar_exact, paired_difference_ci
from tokenrace.text_agreement import agreement_rate, exact_match_rate

DIFFERENCE_METHOD = "Newcombe (1998) method 10: Wilson score intervals combined with the pairs' correlation, 95 %"
VerdictName = Literal["B worse", "within noise", "B better", "no data"]


class Paired(BaseModel):
    both_right: int
    only_a: int  # A right, B wrong
    only_b: int  # B right, A wrong
    both_wrong: int
    n: int
    p_value: float | None  # exact McNemar, two-sided; None with no pairs


class Difference(BaseModel):
    """B's accuracy minus A's over the paired items."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    method: str = DIFFERENCE_METHOD


class AgreementScore(BaseModel):
    exact_match_rate: float | None
    token_similarity: float | None  # mean of agreement() over the pairs
    n: int


class Side(BaseModel):
    label: str
    endpoint: str | None
    model: str | None
    accuracy: Accuracy  # over the paired items only, so A and B are judged on the same questions
    errors: int
    speed: Speed
    engine: EngineInfo | None = None


class SuiteComparison(BaseModel):
    paired: Paired
    difference: Difference
    verdict: VerdictName


class QualityComparison(BaseModel):
    schema_version: int = QUALITY_SCHEMA_VERSION
    kind: Literal["quality-comparison"] = "quality-comparison"
    a: Side
    b: Side
    paired: Paired
    difference: Difference
    verdict: VerdictName
    agreement: AgreementScore
    suites: dict[str, SuiteComparison]
    excluded: dict[str, int]
    warnings: list[str]


def _paired(pairs: list[tuple[ItemResult, ItemResult]]) -> tuple[Paired, Difference, VerdictName]:
    counts = {"both_right": 0, "only_a": 0, "only_b": 0, "both_wrong": 0}
    for a, b in pairs:
        ra, rb = a.verdict == "right", b.verdict == "right"
        key = "both_right" if ra and rb else "only_a" if ra else "only_b" if rb else "both_wrong"
        counts[key] += 1
    n = len(pairs)
    p = mcnemar_exact(counts["only_a"], counts["only_b"]) if n else None
    ci = paired_difference_ci(counts["both_right"], counts["only_a"], counts["only_b"], counts["both_wrong"])
    if ci is None:
        return Paired(**counts, n=0, p_value=None), Difference(value=None, ci_low=None, ci_high=None), "no data"
    diff, low, high = ci
    # The verdict reads the interval: "worse" or "better" only when it excludes no difference.
    verdict: VerdictName = "B worse" if high < 0 else "B better" if low > 0 else "within noise"
    return Paired(**counts, n=n, p_value=p), Difference(value=diff, ci_low=low, ci_high=high), verdict


def compare_items(
    a_items: list[ItemResult],
    b_items: list[ItemResult],
    a_meta: QualityResult | None = None,
    b_meta: QualityResult | None = None,
    labels: tuple[str, str] = ("A", "B"),
) -> QualityComparison:
    b_by_id = {i.id: i for i in b_items}
    a_ids = {i.id for i in a_items}
    common = [(a, b_by_id[a.id]) for a in a_items if a.id in b_by_id]
    if not common:
        raise UsageError("A and B share no item: run both with the same suites and seed")
    for a, b in common:
        if a.prompt != b.prompt:
            raise UsageError(f"item {a.id} asks different questions in A and B: were they run with the same seed?")
    judged = [(a, b) for a, b in common if a.verdict != "error" and b.verdict != "error"]
    paired, difference, verdict = _paired(judged)
    suites: dict[str, SuiteComparison] = {}
    for name in dict.fromkeys(a.suite for a, _ in judged):
        sp, sd, sv = _paired([(a, b) for a, b in judged if a.suite == name])
        suites[name] = SuiteComparison(paired=sp, difference=sd, verdict=sv)
    texts = [(a.output or "", b.output or "") for a, b in judged]
    agree = AgreementScore(
        exact_match_rate=exact_match_rate(texts),
        token_similarity=agreement_rate(texts),
        n=len(texts),
    )
    excluded = {
        "errors_a": sum(1 for a, _ in common if a.verdict == "error"),
        "errors_b": sum(1 for _, b in common if b.verdict == "error"),
        "only_in_a": len(a_ids - set(b_by_id)),
        "only_in_b": len(set(b_by_id) - a_ids),
    }
    return QualityComparison(
        a=_side(labels[0], [a for a, _ in judged], [a for a, _ in common], a_meta),
        b=_side(labels[1], [b for _, b in judged], [b for _, b in common], b_meta),
        paired=paired,
        difference=difference,
        verdict=verdict,
        agreement=agree,
        suites=suites,
        excluded=excluded,
        warnings=_warnings(a_meta, b_meta, excluded),
    )


def _side(label: str, judged: list[ItemResult], asked: list[ItemResult], meta: QualityResult | None) -> Side:
    s = score(judged)
    return Side(
        label=label,
        endpoint=meta.endpoint if meta else None,
        model=meta.model if meta else None,
        accuracy=s.accuracy,
        errors=sum(1 for i in asked if i.verdict == "error"),
        speed=speed(asked),
        engine=meta.engine if meta else None,
    )


def _warnings(a: QualityResult | None, b: QualityResult | None, excluded: dict[str, int]) -> list[str]:
    out = []
    if a is not None and b is not None:
        sa, sb = a.settings, b.settings
        asked = (
            ("temperature", sa.get("temperature"), sb.get("temperature")),
            ("seed", sa.get("seed"), sb.get("seed")),
            ("api", sa.get("api"), sb.get("api")),
        )
        for key, va, vb in asked:
            if va != vb:
                out.append(f"{key} differs: A {va!r}, B {vb!r}")
        if a.interrupted or b.interrupted:
            out.append("a run was interrupted: only the items both answered are compared")
    if excluded["errors_a"] or excluded["errors_b"]:
        out.append(f"failed requests left out of the pairs: {excluded['errors_a']} in A, {excluded['errors_b']} in B")
    if excluded["only_in_a"] or excluded["only_in_b"]:
        out.append(f"items asked on one side only: {excluded['only_in_a']} in A, {excluded['only_in_b']} in B")
    return out


def compare_dirs(a_dir: Path, b_dir: Path, labels: tuple[str, str] = ("A", "B")) -> QualityComparison:
    for d in (a_dir, b_dir):
        if not (Path(d) / ITEMS).is_file():
            raise UsageError(f"{d}: not a quality run directory (no {ITEMS})")
    return compare_items(read_items(a_dir), read_items(b_dir), load_quality(a_dir), load_quality(b_dir), labels)


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "—"
    # A difference of two accuracies is in percentage points, not per cent of either.
    return f"{x * 100:+.1f} pp" if signed else f"{x * 100:.1f} %"


def accuracy_text(a: Accuracy) -> str:
    if a.value is None:
        return "—"
    return f"{_pct(a.value)} [{_pct(a.ci_low)}, {_pct(a.ci_high)}] n={a.n}"


def difference_line(c: QualityComparison) -> str:
    d = c.difference
    if d.value is None:
        return "no item was judged on both sides"
    p = "—" if c.paired.p_value is None else f"{c.paired.p_value:.3g}"
    return (
        f"B - A accuracy {_pct(d.value, True)} [{_pct(d.ci_low, True)}, {_pct(d.ci_high, True)}], "
        f"exact McNemar p = {p}: {c.verdict}"
    )
