"""The verdict from conditions (pure): holds, holds only under (with the limits), fails."""

from __future__ import annotations

from typing import Any

from tokenrace.claim.models import ClaimFile, Condition, Expectation, Limits
from tokenrace.claim.verdict import decide


def check(held: bool, value: float = 100.0) -> dict[str, Any]:
    return {
        "objective": "ttft_p50<=200ms",
        "name": "ttft_p50",
        "value": value,
        "ci_low": value - 5,
        "ci_high": value + 5,
        "held": held,
        "clear": True,
    }


def condition(dimension: str, value: Any, held: bool | None, ttft: float = 100.0, **extra: Any) -> Condition:
    checks = [] if held is None else [check(held, ttft)]
    return Condition(dimension=dimension, value=value, held=held, checks=checks, **extra)  # type: ignore[arg-type]


def claim(*conditions: Condition, limits: Limits | None = None) -> ClaimFile:
    c = ClaimFile(budget_s=60, expectations=[Expectation(text="ttft_p50<=200ms")], conditions=list(conditions))
    c.limits = limits or Limits()
    decide(c)
    return c


def test_every_condition_held() -> None:
    c = claim(
        condition("warm", 1, True, figures={"error_rate": 0.0}),
        condition("content", None, None, skipped="not available"),
    )
    assert c.verdict == "holds" and "not measured: content" in (c.sentence or "")


def test_holds_only_under_names_the_limits_and_the_first_failure() -> None:
    c = claim(
        condition("warm", 1, True, figures={"error_rate": 0.0}),
        condition("concurrency", 4, True),
        condition("concurrency", 5, False, 412.0),
        condition("concurrency", 8, False, 900.0),
        condition("prompt_tokens", 256, True),
        condition("prompt_tokens", 512, False, 260.0),
        limits=Limits(concurrency=4, concurrency_failing=5, prompt_tokens=256, prompt_tokens_failing=512),
    )
    assert c.verdict == "holds_only_under"
    assert c.restrictions == ["concurrency ≤ 4", "prompts ≤ 256 tokens"]
    assert c.sentence == (
        "Holds only under: concurrency ≤ 4 and prompts ≤ 256 tokens. At concurrency 5, TTFT p50 is 412 ms "
        "[407, 417]. For 512-token prompts, TTFT p50 is 260 ms [255, 265]."
    )


def test_a_failing_baseline_fails_the_claim() -> None:
    c = claim(condition("warm", 1, False, 350.0, figures={"error_rate": 0.0}), condition("concurrency", 1, False))
    assert c.verdict == "fails" and "TTFT p50 is 350 ms" in c.reasons[0]


def test_half_the_requests_failing_is_the_reason() -> None:
    c = claim(condition("warm", 1, True, figures={"error_rate": 0.5}))
    assert c.verdict == "fails" and c.reasons == ["the server failed 50 % of the baseline's requests"]


def test_no_baseline_no_verdict() -> None:
    c = claim(condition("warm", 1, None, skipped="interrupted"))
    assert c.verdict is None and "No verdict" in (c.sentence or "")
