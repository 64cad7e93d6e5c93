"""The verdict on a claim, from the conditions measured (docs/claim.md, "How the verdict is reached").

- `fails`: the baseline (warm, one request at a time, short prompts) did not meet every expectation,
  or the server failed half of the baseline's requests or more (the error rate is then the reason).
- `holds`: every condition measured met every expectation.
- `holds_only_under`: the baseline met them, some other condition did not; the restrictions name
  where the claim stops holding (the highest concurrency and the longest prompt that held, a warm
  server, a cached prefix, the start of the run).

A condition that was skipped (budget, request or cost limits, a feature this endpoint lacks) is
listed and never counted for or against the claim.
"""

from __future__ import annotations

from tokenrace.claim.models import ClaimFile, Condition
from tokenrace.figures.objectives import describe_saved_check

FAILING_ERROR_RATE = 0.5  # the baseline's error rate at which the claim fails for errors alone


def decide(claim: ClaimFile) -> None:
    """Fill `verdict`, `reasons`, `restrictions` and `sentence` from the conditions."""
    measured = [c for c in claim.conditions if c.held is not None]
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
    if not baseline.held:
        claim.verdict = "fails"
        claim.reasons = [_why(baseline, "for one warm request at a time with short prompts")]
        claim.sentence = f"Fails: {claim.reasons[0]}."
        return
    failed = [c for c in measured if not c.held]
    if not failed:
        claim.verdict = "holds"
        claim.sentence = "Holds under every condition measured" + _reach(claim) + _skipped_note(claim) + "."
        return
    claim.verdict = "holds_only_under"
    claim.restrictions = _restrictions(claim, failed)
    claim.reasons = [_why(c, _where(c)) for c in _first_failures(failed)]
    under = " and ".join(claim.restrictions) if claim.restrictions else "the baseline's conditions"
    claim.sentence = f"Holds only under: {under}. " + " ".join(_capital(r) + "." for r in claim.reasons)


def _restrictions(claim: ClaimFile, failed: list[Condition]) -> list[str]:
    dims = {c.dimension for c in failed}
    out = []
    if "concurrency" in dims or claim.limits.concurrency is not None and claim.limits.concurrency_failing is not None:
        if claim.limits.concurrency is not None:
            out.append(f"concurrency ≤ {claim.limits.concurrency}")
        else:
            out.append("one request at a time")
    if "prompt_tokens" in dims and claim.limits.prompt_tokens is not None:
        out.append(f"prompts ≤ {claim.limits.prompt_tokens} tokens")
    if "cold" in dims:
        out.append("a warm server (the first request missed)")
    if "cache" in dims:
        kinds = sorted(str(c.value) for c in failed if c.dimension == "cache")
        out.append("prompts whose prefix is cached" if kinds == ["busted"] else "prompts the cache has not seen")
    if "drift" in dims:
        out.append("the start of the run (by its end the server was slower)")
    if "content" in dims:
        held = sorted({str(c.value) for c in claim.conditions if c.dimension == "content" and c.held})
        out.append("content like " + " or ".join(held) if held else "content other than the kinds tried")
    return out


def _first_failures(failed: list[Condition]) -> list[Condition]:
    """The first failing condition of each dimension (the one nearest the limit)."""
    seen: dict[str, Condition] = {}
    for c in failed:
        seen.setdefault(c.dimension, c)
    return list(seen.values())


def _where(c: Condition) -> str:
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
    return f"for {c.dimension} {c.value}"


def _why(c: Condition, where: str) -> str:
    missed = [k for k in c.checks if k.held is False]
    if not missed:
        return f"{where}, a figure was undefined (no request succeeded)"
    return f"{where}, " + ", ".join(describe_saved_check(k) for k in missed)


def _reach(claim: ClaimFile) -> str:
    """How far the measurements went, when the claim held all the way: the highest load and the
    longest prompt tried are the limits of what was shown, not of the server."""
    parts = []
    if claim.limits.concurrency is not None:
        parts.append(f"concurrency {claim.limits.concurrency}")
    if claim.limits.prompt_tokens is not None:
        parts.append(f"{claim.limits.prompt_tokens}-token prompts")
    return f", up to {' and '.join(parts)}" if parts else ""


def _skipped_note(claim: ClaimFile) -> str:
    skipped = [c.dimension for c in claim.conditions if c.held is None and c.skipped]
    return f" (not measured: {', '.join(dict.fromkeys(skipped))})" if skipped else ""


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
