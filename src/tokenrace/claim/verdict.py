"""The verdict on a claim, from the conditions measured (docs/claim.md, "How the verdict is reached").

Each condition's checks have three outcomes (held, failed, unproven: figures/objectives.py). Then:

- `fails`: the baseline (warm, one request at a time, short prompts) failed an expectation with
  certainty, or the server failed half of the baseline's requests or more.
- `unproven`: the baseline itself is undecided; the reasons name what is missing ("TTFT p99 of the
  baseline: 10 requests, at least 299 needed").
- `holds`: the baseline held with certainty and no condition failed with certainty (a cold request
  that missed, when the baseline's own spread explains it, is noted and no restriction). Conditions
  left unproven or skipped are listed as the limits of what was shown.
- `holds_only_under`: the baseline held with certainty, and some condition failed with certainty
  *and* differs from its reference beyond chance: its share of requests over the limit against the
  reference's (Fisher's exact test at the claim's confidence). The reference is the baseline, except
  for the cache conditions, which are compared with each other (same prompt length). A condition that
  differs from its reference in another factor too (prompt length, for a condition that does not name
  it) is never a restriction. A condition whose failure is the tail the reference has too names no
  restriction: it makes the verdict `unproven`, since the baseline's certainty then rests on chance.

A condition that was skipped (budget, request or cost limits, a feature this endpoint lacks) is
listed and never counted for or against the claim.

The compliance conditions (claim/compliance.py, MLPerf's TEST04, TEST06 and TEST09) say whether the
figures can be trusted at all, so they are applied after the speed's verdict:

- a server that misreports its token counts or ends an answer twice (TEST06), or that answers a
  prompt it has seen faster than a new one (TEST04), makes every speed figure untrustworthy: the
  verdict is `fails`, whatever the speed showed, and the reasons name the compliance failure first;
- outputs shorter (or longer) than asked with `--ignore-eos` (TEST09) mean the speed was measured on
  other answers than the claim's: that shows nothing false, so `holds` and `holds_only_under` become
  `unproven` ("outputs shorter than asked"), and `fails` and `unproven` keep their verdict with the
  reason added;
- an undecided compliance condition is listed with the undecided conditions and changes nothing.
"""

from __future__ import annotations

from tokenrace.claim import compliance
from tokenrace.claim.models import ClaimFile, Condition, ConditionCheck
from tokenrace.figures.objectives import describe_saved_check, label_of, parse_objective
from tokenrace.model.claim import Outcome
from tokenrace.stats import CONFIDENCE, fisher_greater

FAILING_ERROR_RATE = 0.5  # the baseline's error rate at which the claim fails for errors alone
SAME_PROMPT = 0.25  # prompt lengths within this share of each other count as the same


def outcome_of(checks: list[ConditionCheck]) -> Outcome:
    """A condition's outcome from its checks: failed when one failed with certainty (or was undefined:
    no request succeeded), held when all held with certainty, else unproven."""
    if any(k.outcome == "failed" or k.held is None for k in checks):
        return "failed"
    if checks and all(k.outcome == "held" for k in checks):
        return "held"
    return "unproven"


def decide(claim: ClaimFile) -> None:
    """Fill `verdict`, `reasons`, `restrictions` and `sentence` from the conditions: the speed's
    verdict, then what the compliance conditions make of it."""
    _decide_speed(claim)
    _apply_compliance(claim)


# The compliance failures that make the figures untrustworthy (the others leave the claim unproven).
UNTRUSTWORTHY = (compliance.TOKEN_COUNT, compliance.FINISHES, compliance.REPEATED_PROMPT)


def _apply_compliance(claim: ClaimFile) -> None:
    checked = [c for c in claim.conditions if c.dimension == "compliance" and c.held is not None]
    if claim.verdict == "holds":
        claim.reasons += [f"undecided {_where(c)}: {c.note}" for c in checked if c.outcome == "unproven"]
    failed = [c for c in checked if c.outcome == "failed"]
    if not failed or claim.verdict is None:
        return
    why = [_compliance_reason(c) for c in failed]
    untrustworthy = any(c.value in UNTRUSTWORTHY for c in failed)
    if untrustworthy:
        claim.verdict = "fails"
        claim.restrictions = []
        claim.reasons = why + claim.reasons
        claim.sentence = "Fails: the server's figures cannot be trusted. " + " ".join(_capital(r) + "." for r in why)
        return
    claim.reasons = why + claim.reasons
    if claim.verdict in ("holds", "holds_only_under"):
        claim.verdict = "unproven"
        claim.restrictions = []
        claim.sentence = "Unproven: the speed was measured on answers of another length than asked. " + " ".join(
            _capital(r) + "." for r in why
        )
        return
    claim.sentence = (claim.sentence or "") + " " + " ".join(_capital(r) + "." for r in why)


def _compliance_reason(c: Condition) -> str:
    """'outputs shorter than asked (TEST09): outputs average 40.0 tokens of 128 asked (31 %) over 20'."""
    f = c.figures.get("compliance")
    if c.value == compliance.OUTPUT_LENGTH:
        ratio = f.length_ratio if f is not None else None
        what = "outputs longer than asked" if ratio is not None and ratio > 1 else "outputs shorter than asked"
        return f"{what} (TEST09): {c.note}"
    if c.value == compliance.TOKEN_COUNT:
        return f"the server misreports its output tokens (TEST06): {c.note}"
    if c.value == compliance.FINISHES:
        return f"the server ends answers more than once (TEST06): {c.note}"
    return (
        f"the server answers a prompt it has seen faster than a new one, as a cache of answers would (TEST04): {c.note}"
    )


def _decide_speed(claim: ClaimFile) -> None:
    # The compliance conditions are applied afterwards (`_apply_compliance`), never as restrictions.
    measured = [c for c in claim.conditions if c.held is not None and c.dimension != "compliance"]
    baseline = next((c for c in measured if c.dimension == "warm"), None)
    claim.restrictions = []
    claim.reasons = []
    if baseline is None:
        claim.verdict = None
        claim.sentence = "No verdict: the baseline (warm requests, one at a time) was not measured."
        return
    rate = baseline.figures.get("error_rate")
    if rate is not None and rate >= FAILING_ERROR_RATE:
        claim.verdict = "fails"
        claim.reasons = [f"the server failed {rate * 100:.0f} % of the baseline's requests"]
        claim.sentence = f"Fails: {claim.reasons[0]}."
        return
    base = _outcome(baseline)
    if base == "failed":
        claim.verdict = "fails"
        claim.reasons = [_why(baseline, "for one warm request at a time with short prompts")]
        claim.sentence = f"Fails: {claim.reasons[0]}."
        return
    if base == "unproven":
        claim.verdict = "unproven"
        claim.reasons = [_missing(baseline, "of the baseline")]
        claim.sentence = f"Unproven: not enough evidence. {_capital(claim.reasons[0])}." + _failed_note(claim)
        return
    failed = [c for c in measured if c.dimension != "warm" and _outcome(c) == "failed"]
    restricting = [c for c in failed if _attributable(claim, c)]
    chance = [c for c in failed if c not in restricting]
    if not restricting and all(c.dimension == "cold" for c in chance):
        # One slow first request that the baseline's own spread explains is no restriction.
        claim.verdict = "holds"
        claim.reasons = [_missing(c, _where(c)) for c in measured if _outcome(c) == "unproven"]
        claim.reasons += [_why(c, _where(c)) + " (within the baseline's spread)" for c in chance]
        claim.sentence = (
            "Holds under every condition decided" + _reach(claim) + _undecided_note(claim) + _skipped_note(claim) + "."
        )
        return
    if not restricting:
        claim.verdict = "unproven"
        claim.reasons = [_why(c, _where(c)) + " (no more often than its reference, within chance)" for c in chance]
        claim.sentence = (
            "Unproven: the baseline held, but conditions failed with a tail their reference shares within "
            "chance. " + " ".join(_capital(r) + "." for r in claim.reasons)
        )
        return
    claim.verdict = "holds_only_under"
    claim.restrictions = _restrictions(claim, restricting)
    claim.reasons = [_why(c, _where(c)) for c in _first_failures(restricting)]
    under = " and ".join(claim.restrictions) if claim.restrictions else "the baseline's conditions"
    claim.sentence = f"Holds only under: {under}. " + " ".join(_capital(r) + "." for r in claim.reasons)


def _outcome(c: Condition) -> Outcome:
    return c.outcome or outcome_of(c.checks)


# --- one factor at a time, beyond chance ------------------------------------------------------------


def _reference(claim: ClaimFile, c: Condition) -> Condition | None:
    """What the condition is compared with: the other cache condition (same prompt length) for the
    cache, else the baseline."""
    if c.dimension == "cache":
        other = "shared_prefix" if c.value == "busted" else "busted"
        return next(
            (r for r in claim.conditions if r.dimension == "cache" and r.value == other and r.held is not None), None
        )
    return next((r for r in claim.conditions if r.dimension == "warm" and r.held is not None), None)


def _attributable(claim: ClaimFile, c: Condition) -> bool:
    """The condition's failure is its own: it differs from its reference in the factor it names
    only, and some failed check is worse than the reference's beyond chance."""
    ref = _reference(claim, c)
    if ref is None:
        return False
    if c.dimension not in ("prompt_tokens",) and not _same_prompts(c, ref):
        return False
    confidence = next((k.confidence for k in c.checks if k.confidence), None) or CONFIDENCE
    theirs = {k.objective: k for k in ref.checks}
    return any(_beyond_chance(k, theirs.get(k.objective), confidence) for k in c.checks if k.outcome == "failed")


def _same_prompts(c: Condition, ref: Condition) -> bool:
    a, b = c.figures.get("prompt_tokens_mean"), ref.figures.get("prompt_tokens_mean")
    if a is None or b is None:
        return True  # not recorded (an old claim, the cold request): the battery sized both alike
    return abs(a - b) <= SAME_PROMPT * max(a, b)


def _beyond_chance(k: ConditionCheck, ref: ConditionCheck | None, confidence: float) -> bool:
    """The condition's share of requests over the limit exceeds the reference's beyond chance
    (one-sided Fisher exact test). Without counts (a whole-run rate, a mean): a reference that held
    against a condition that failed, with bounds that do not overlap."""
    if ref is None:
        return False
    if k.over is not None and k.requests and ref.over is not None and ref.requests:
        return fisher_greater(k.over, k.requests, ref.over, ref.requests) <= 1 - confidence
    if ref.outcome != "held":
        return False
    if k.ci_low is None and k.ci_high is None:  # a whole-run rate: one measured number each
        return True
    lo_k, hi_k, lo_r, hi_r = k.ci_low, k.ci_high, ref.ci_low, ref.ci_high
    if None in (lo_k, hi_k, lo_r, hi_r):
        return False
    assert lo_k is not None and hi_k is not None and lo_r is not None and hi_r is not None
    return hi_k < lo_r or lo_k > hi_r


# --- sentences ---------------------------------------------------------------------------------------


def _restrictions(claim: ClaimFile, failed: list[Condition]) -> list[str]:
    dims = {c.dimension for c in failed}
    out = []
    if "concurrency" in dims:
        lowest = min(_number(c) for c in failed if c.dimension == "concurrency")
        held = [_number(c) for c in claim.conditions if c.dimension == "concurrency" and _outcome(c) == "held"]
        below = [v for v in held if v < lowest]
        out.append(f"concurrency ≤ {max(below):g}" if below else f"concurrency below {lowest:g}")
    if "prompt_tokens" in dims:
        shortest = min(_number(c) for c in failed if c.dimension == "prompt_tokens")
        held = [_number(c) for c in claim.conditions if c.dimension == "prompt_tokens" and _outcome(c) == "held"]
        below = [v for v in held if v < shortest]
        out.append(f"prompts ≤ {max(below):g} tokens" if below else f"prompts shorter than {shortest:g} tokens")
    if "cold" in dims:
        out.append("a warm server (the first request missed)")
    if "cache" in dims:
        kinds = sorted(str(c.value) for c in failed if c.dimension == "cache")
        out.append("prompts whose prefix is cached" if kinds == ["busted"] else "prompts the cache has not seen")
    if "drift" in dims:
        out.append("the start of the run (by its end the server was slower)")
    if "content" in dims:
        bad = {str(c.value) for c in failed if c.dimension == "content"}
        good = sorted(
            {str(c.value) for c in claim.conditions if c.dimension == "content" and _outcome(c) == "held"} - bad
        )
        out.append("content like " + " or ".join(good) if good else "content other than " + " and ".join(sorted(bad)))
    return out


def _number(c: Condition) -> float:
    return float(c.value) if isinstance(c.value, int | float) else float(str(c.value))


def _first_failures(failed: list[Condition]) -> list[Condition]:
    """The first failing condition of each dimension (the one nearest the limit)."""
    seen: dict[str, Condition] = {}
    for c in failed:
        seen.setdefault(c.dimension, c)
    return list(seen.values())


def _where(c: Condition) -> str:
    if c.dimension == "warm":
        return "for the baseline"
    if c.dimension == "concurrency":
        return f"at concurrency {c.value}"
    if c.dimension == "prompt_tokens":
        return f"for {c.value}-token prompts"
    if c.dimension == "cold":
        return "for the cold (first) request"
    if c.dimension == "cache":
        return "with the cache busted" if c.value == "busted" else "with a shared prefix"
    if c.dimension == "drift":
        return "at the end of the run"
    if c.dimension == "content":
        return f"when asked to write {c.value} text"
    if c.dimension == "compliance":
        return f"for {compliance.NAMES.get(str(c.value), str(c.value))}"
    return f"for {c.dimension} {c.value}"


def _why(c: Condition, where: str) -> str:
    missed = [k for k in c.checks if k.outcome == "failed" or k.held is None]
    if not missed:
        return f"{where}, a figure was undefined (no request succeeded)"
    return f"{where}, " + ", ".join(describe_saved_check(k) for k in missed)


def _missing(c: Condition, where: str) -> str:
    """'TTFT p99 of the baseline: 10 requests, at least 299 needed'."""
    parts = []
    for k in c.checks:
        if k.outcome != "unproven":
            continue
        need = f", at least {k.needed} needed" if k.needed is not None else ", its bounds reach over the limit"
        parts.append(f"{label_of(parse_objective(k.objective, 'expect'))} {where}: {k.requests or 0} requests{need}")
    return "; ".join(parts) if parts else f"{where}: undecided"


def _reach(claim: ClaimFile) -> str:
    """How far the measurements went: the highest load and the longest prompt that held with
    certainty are the limits of what was shown, not of the server."""
    parts = []
    conc = [_number(c) for c in claim.conditions if c.dimension == "concurrency" and _outcome(c) == "held"]
    prompts = [_number(c) for c in claim.conditions if c.dimension == "prompt_tokens" and _outcome(c) == "held"]
    if conc:
        parts.append(f"concurrency {max(conc):g}")
    if prompts:
        parts.append(f"{max(prompts):g}-token prompts")
    return f", up to {' and '.join(parts)}" if parts else ""


def _undecided_note(claim: ClaimFile) -> str:
    undecided = [_where(c) for c in claim.conditions if c.held is not None and _outcome(c) == "unproven"]
    return f" (undecided: {', '.join(undecided)})" if undecided else ""


def _failed_note(claim: ClaimFile) -> str:
    failed = [
        c
        for c in claim.conditions
        if c.held is not None and c.dimension not in ("warm", "compliance") and _outcome(c) == "failed"
    ]
    return f" Failed with certainty: {'; '.join(_why(c, _where(c)) for c in failed)}." if failed else ""


def _skipped_note(claim: ClaimFile) -> str:
    skipped = [c.dimension for c in claim.conditions if c.held is None and c.skipped]
    return f" (not measured: {', '.join(dict.fromkeys(skipped))})" if skipped else ""


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
