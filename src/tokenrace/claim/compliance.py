"""What MLPerf Inference's compliance tests catch, judged as conditions of a claim (docs/claim.md,
"Compliance"; mlcommons/inference `compliance/TEST04`, `TEST06`, `TEST09`).

- `token_count` (TEST06, "sample length check"): the output tokens the server reports in `usage`
  equal the tokens it streamed, answer by answer.
- `finishes` (TEST06, "EOS check"): an answer ends once: at most one streamed event carries a
  finish reason.
- `output_length` (TEST09): with `ignore_eos`, the mean output is within ±10 % of the `max_tokens`
  asked: a server that stops early shortens its answers, and short answers flatter tokens per second.
- `repeated_prompt` (TEST04): the same prompt sent again and again decodes at most 10 % faster than
  the baseline's distinct prompts of the same length: a server that caches answers is fast only on
  prompts it has seen.

Each has three outcomes, as the expectations' checks do (held, failed, unproven). MLPerf asks every
sample of its audit run to pass TEST06; here a share of answers that disagree is judged with its exact
bounds, so one stray answer among many is no proof: it fails when the share is certainly above
`STRAY_SHARE`, and holds when no answer of at least `MIN_ANSWERS` disagrees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from tokenrace.claim.models import Condition, ConditionFigures
from tokenrace.figures.objectives import Sample
from tokenrace.model.claim import ComplianceFigures, Outcome
from tokenrace.model.files import RECORDS, read_jsonl
from tokenrace.model.records import RequestRecord
from tokenrace.stats import ratio_ci, share_bounds, statistic_ci

TOKEN_COUNT = "token_count"
FINISHES = "finishes"
OUTPUT_LENGTH = "output_length"
REPEATED_PROMPT = "repeated_prompt"
# What each check is called in a sentence, and which MLPerf test it follows.
NAMES = {
    TOKEN_COUNT: "the token counts the server reports (TEST06)",
    FINISHES: "one finish per answer (TEST06)",
    OUTPUT_LENGTH: "outputs as long as asked (TEST09)",
    REPEATED_PROMPT: "a repeated prompt against distinct ones (TEST04)",
}
MIN_ANSWERS = 10  # TEST06 holds when none of at least this many answers disagrees
STRAY_SHARE = 0.01  # TEST06 fails when the share of answers that disagree is certainly above this
LENGTH_TOLERANCE = 0.10  # TEST09: the mean output within ±10 % of what was asked
REPEAT_SPEEDUP = 1.10  # TEST04: the repeated prompt at most 10 % faster (MLPerf's threshold)
# MLPerf relaxes TEST04 to 20 % for very short latencies, where the OS's noise is a larger share; a
# TPOT of a few ms is such a case (a gap of one or two chunks, stamped on a busy client).
SHORT_TPOT_MS = 5.0
SHORT_REPEAT_SPEEDUP = 1.20
# Below this a TPOT is not timed but sampled: two chunks a millisecond apart often arrive in one read
# of the socket, so a gap reads 0.1 ms or 1 ms by chance (an honest fake once "decoded 7x as fast" on
# its repeated prompt at 1 ms a token). The check is then undecided, never failed.
MIN_TIMED_TPOT_MS = 2.0
EOS_SLACK = 1  # usage may count the end-of-sequence token, which is never streamed
TOKENIZER_SLACK = 0.05  # re-encoding streamed text may merge or split a few tokens: 5 %, at least 1


def answers_in(directories: Sequence[Path]) -> list[RequestRecord]:
    """The measured, succeeded requests of the runs in `directories`."""
    lines: list[RequestRecord] = []
    for d in directories:
        if not (d / RECORDS).exists():
            continue
        for raw in read_jsonl(d / RECORDS):
            r = RequestRecord.model_validate(raw)
            if r.phase == "measure" and r.error_kind is None:
                lines.append(r)
    return lines


def _condition(value: str, outcome: Outcome, held: bool, figures: ComplianceFigures, note: str) -> Condition:
    return Condition(
        dimension="compliance",
        value=value,
        held=held,
        outcome=outcome,
        figures=ConditionFigures(compliance=figures),
        note=note,
    )


def _skipped(value: str, why: str) -> Condition:
    return Condition(dimension="compliance", value=value, skipped=why)


def _share_outcome(k: int, n: int, confidence: float) -> tuple[Outcome, float | None, float | None]:
    """TEST06's share rule: failed when the share of bad answers is certainly above STRAY_SHARE, held
    when none of at least MIN_ANSWERS is bad, unproven otherwise."""
    low, high = share_bounds(k, n, confidence)
    if low is not None and low > STRAY_SHARE:
        return "failed", low, high
    if k == 0 and n >= MIN_ANSWERS:
        return "held", low, high
    return "unproven", low, high


def disagrees(r: RequestRecord) -> bool | None:
    """Whether one answer's reported token count disagrees with what it streamed; None when it cannot
    be told (no usage count, nothing streamed, or more reported than chunks with no tokenizer)."""
    reported, streamed = r.output_tokens, r.streamed_tokens
    if r.output_tokens_source != "usage" or reported is None or streamed is None:
        return None
    if r.streamed_tokens_source == "chunks":
        if reported < streamed:
            return True  # every content event carries a token at least
        if reported <= streamed + EOS_SLACK:
            return False
        return None  # several tokens to an event, or an inflated count: chunks cannot tell which
    slack = max(1, math.ceil(TOKENIZER_SLACK * streamed))
    return not -slack <= reported - streamed <= slack + EOS_SLACK


def token_count(answers: Sequence[RequestRecord], confidence: float) -> Condition:
    """TEST06's sample length check: usage's output tokens against the tokens streamed."""
    judged = [(r, disagrees(r)) for r in answers if r.output_tokens_source == "usage" and r.streamed_tokens]
    if not judged:
        return _skipped(TOKEN_COUNT, "no streamed answer came with a usage count to compare")
    told = [(r, d) for r, d in judged if d is not None]
    k, n, undecidable = sum(1 for _, d in told if d), len(told), len(judged) - len(told)
    reported = [float(r.output_tokens or 0) for r, _ in judged]
    streamed = [float(r.streamed_tokens or 0) for r, _ in judged]
    outcome, low, high = _share_outcome(k, n, confidence) if n else ("unproven", None, None)
    if outcome == "held" and undecidable:
        outcome = "unproven"
    figures = ComplianceFigures(
        answers=n,
        disagreeing=k,
        undecidable=undecidable,
        share=_r(k / n) if n else None,
        share_low=_r(low),
        share_high=_r(high),
        reported_tokens_mean=_r(_mean(reported)),
        streamed_tokens_mean=_r(_mean(streamed)),
    )
    note = (
        f"usage reports {_mean(reported):.1f} output tokens an answer, {_mean(streamed):.1f} were streamed; "
        f"{k} of {n} answers disagree"
    )
    if undecidable:
        note += (
            f"; {undecidable} report more tokens than the events streamed (several tokens to an event, or an "
            "inflated count: a tokenizer would tell)"
        )
    return _condition(TOKEN_COUNT, outcome, k == 0, figures, note)


def finishes(answers: Sequence[RequestRecord], confidence: float) -> Condition:
    """TEST06's EOS check: no answer ends twice."""
    counted = [r.finishes for r in answers if r.finishes is not None]
    if not counted:
        return _skipped(FINISHES, "no chat or completions stream: finish events were not counted")
    k, n = sum(1 for f in counted if f > 1), len(counted)
    outcome, low, high = _share_outcome(k, n, confidence)
    figures = ComplianceFigures(
        answers=n,
        disagreeing=k,
        share=_r(k / n),
        share_low=_r(low),
        share_high=_r(high),
        finishes_max=max(counted),
    )
    note = f"{k} of {n} answers carried more than one finish (at most {max(counted)})"
    return _condition(FINISHES, outcome, k == 0, figures, note)


def output_length(answers: Sequence[RequestRecord], ignore_eos: bool, confidence: float) -> Condition:
    """TEST09: with ignore_eos, the mean of output ÷ max_tokens within ±10 % of 1, its bounds the
    bootstrap's (each side at `confidence`). Outputs counted as `_produced` says."""
    if not ignore_eos:
        return _skipped(OUTPUT_LENGTH, "needs --ignore-eos: without it the server decides when to stop")
    pairs = [(n, r.max_tokens) for r in answers if (n := _produced(r)) is not None and r.max_tokens]
    if not pairs:
        return _skipped(OUTPUT_LENGTH, "no answer with both an output count and a max_tokens")
    ratios = [out / asked for out, asked in pairs if asked]
    value, low, high = statistic_ci(ratios, "mean", confidence=2 * confidence - 1)
    assert value is not None
    lo, hi = 1 - LENGTH_TOLERANCE, 1 + LENGTH_TOLERANCE
    outcome: Outcome = "unproven"
    if low is not None and high is not None and lo <= low and high <= hi:
        outcome = "held"
    elif (high is not None and high < lo) or (low is not None and low > hi):
        outcome = "failed"
    out_mean = _mean([float(o) for o, _ in pairs])
    asked_mean = _mean([float(a) for _, a in pairs])
    figures = ComplianceFigures(
        answers=len(pairs),
        output_tokens_mean=_r(out_mean),
        asked_tokens_mean=_r(asked_mean),
        length_ratio=_r(value),
        length_ratio_low=_r(low),
        length_ratio_high=_r(high),
    )
    note = f"outputs average {out_mean:.1f} tokens of {asked_mean:.0f} asked ({value * 100:.0f} %) over {len(pairs)}"
    return _condition(OUTPUT_LENGTH, outcome, lo <= value <= hi, figures, note)


def _produced(r: RequestRecord) -> int | None:
    """The tokens an answer had: the streamed text's count by a tokenizer, which no misreported usage
    moves (TEST06 judges the report), else the request's own count."""
    return r.streamed_tokens if r.streamed_tokens_source == "tokenizer" else r.output_tokens


def repeated_prompt(repeated: Sample, distinct: Sample, confidence: float) -> Condition:
    """TEST04: distinct p50 ÷ repeated p50 of TPOT (how many times faster the repeated prompt decodes),
    with its bootstrap interval (each side at `confidence`); at most REPEAT_SPEEDUP (SHORT_REPEAT_SPEEDUP
    when the distinct prompts' TPOT p50 is under SHORT_TPOT_MS). TTFT and E2E are
    shown, not judged: a prefix cache legitimately shortens a repeated prompt's prefill."""
    two_sided = 2 * confidence - 1
    tpot = ratio_ci(repeated.tpot_ms, distinct.tpot_ms, "p50", confidence=two_sided)
    ttft = ratio_ci(repeated.ttft_ms, distinct.ttft_ms, "p50", confidence=two_sided)
    e2e = ratio_ci(repeated.e2e_ms, distinct.e2e_ms, "p50", confidence=two_sided)
    figures = ComplianceFigures(
        repeated=len(repeated.tpot_ms),
        distinct=len(distinct.tpot_ms),
        speedup_tpot_p50=_r(tpot.ratio),
        speedup_tpot_low=_r(tpot.low),
        speedup_tpot_high=_r(tpot.high),
        speedup_ttft_p50=_r(ttft.ratio),
        speedup_e2e_p50=_r(e2e.ratio),
    )
    if tpot.ratio is None:
        note = "TPOT undefined (answers of one token?): nothing to compare"
        return _condition(REPEATED_PROMPT, "unproven", True, figures, note)
    shortest = min(v for v in (tpot.a, tpot.b) if v is not None)
    if shortest < MIN_TIMED_TPOT_MS:
        note = (
            f"decode too quick to time: TPOT p50 {_fmt(tpot.a)} ms repeated, {_fmt(tpot.b)} ms distinct "
            f"(chunks under {MIN_TIMED_TPOT_MS:g} ms apart share socket reads); nothing decided"
        )
        return _condition(REPEATED_PROMPT, "unproven", True, figures, note)
    limit = SHORT_REPEAT_SPEEDUP if tpot.b is not None and tpot.b < SHORT_TPOT_MS else REPEAT_SPEEDUP
    outcome: Outcome = "unproven"
    if tpot.high is not None and tpot.high <= limit:
        outcome = "held"
    elif tpot.low is not None and tpot.low > limit:
        outcome = "failed"
    bounds = f" [{_fmt(tpot.low)}, {_fmt(tpot.high)}]"
    note = (
        f"the same prompt repeated decodes {tpot.ratio:.2f}x as fast as distinct ones{bounds}, at most {limit:.2f}x "
        f"({figures.repeated} against {figures.distinct} requests; TTFT {_fmt(ttft.ratio)}x, E2E {_fmt(e2e.ratio)}x)"
    )
    if tpot.needed is not None:
        note += f"; {tpot.needed} requests each would bound it"
    return _condition(REPEATED_PROMPT, outcome, tpot.ratio <= limit, figures, note)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _r(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, 4)


def _fmt(v: float | None) -> str:
    return "no bound" if v is None else f"{v:.2f}"
