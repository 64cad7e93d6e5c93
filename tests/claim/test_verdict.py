"""The verdict from conditions (pure): holds, holds only under (with the limits), fails, unproven;
a restriction only where a condition differs from its reference beyond chance."""

from __future__ import annotations

from typing import Any

from tokenrace.claim.models import ClaimFile, Condition, Expectation, Limits
from tokenrace.claim.verdict import decide

P99 = "ttft_p99<=200ms"


def check(outcome: str, value: float = 100.0, over: int = 0, requests: int = 300, **extra: Any) -> dict[str, Any]:
    return {
        "objective": P99,
        "name": "ttft_p99",
        "value": value,
        "ci_low": value - 5,
        "ci_high": value + 5,
        "held": value <= 200,
        "clear": outcome != "unproven",
        "outcome": outcome,
        "confidence": 0.95,
        "requests": requests,
        "over": over,
        **extra,
    }


def condition(dimension: str, value: Any, outcome: str | None, ttft: float = 100.0, **extra: Any) -> Condition:
    over, requests = extra.pop("over", 0), extra.pop("requests", 300)
    checks = [] if outcome is None else [check(outcome, ttft, over, requests, needed=extra.pop("needed", None))]
    held = None if outcome is None else ttft <= 200
    return Condition(dimension=dimension, value=value, held=held, outcome=outcome, checks=checks, **extra)  # type: ignore[arg-type]


def claim(*conditions: Condition, limits: Limits | None = None) -> ClaimFile:
    c = ClaimFile(budget_s=60, expectations=[Expectation(text=P99)], conditions=list(conditions))
    c.limits = limits or Limits()
    decide(c)
    return c


def warm(outcome: str = "held", **extra: Any) -> Condition:
    return condition("warm", 1, outcome, figures={"error_rate": 0.0}, **extra)


def test_every_condition_held() -> None:
    c = claim(warm(), condition("content", None, None, skipped="not available"))
    assert c.verdict == "holds" and "not measured: content" in (c.sentence or "")


def test_holds_only_under_names_the_limits_and_the_first_failure() -> None:
    c = claim(
        warm(),
        condition("concurrency", 4, "held"),
        condition("concurrency", 5, "failed", 412.0, over=60, requests=300),
        condition("concurrency", 8, "failed", 900.0, over=200, requests=300),
        condition("prompt_tokens", 256, "held"),
        condition("prompt_tokens", 512, "failed", 260.0, over=40, requests=300),
    )
    assert c.verdict == "holds_only_under"
    assert c.restrictions == ["concurrency ≤ 4", "prompts ≤ 256 tokens"]
    assert c.sentence == (
        "Holds only under: concurrency ≤ 4 and prompts ≤ 256 tokens. At concurrency 5, TTFT p99 is 412 ms "
        "[407, 417]. For 512-token prompts, TTFT p99 is 260 ms [255, 265]."
    )


def test_a_failing_baseline_fails_the_claim() -> None:
    c = claim(warm("failed", ttft=350.0, over=30), condition("concurrency", 1, "failed", 350.0, over=30))
    assert c.verdict == "fails" and "TTFT p99 is 350 ms" in c.reasons[0]


def test_an_undecided_baseline_is_unproven_and_says_what_is_missing() -> None:
    c = claim(
        warm("unproven", requests=10, needed=299), condition("concurrency", 2, "failed", 400.0, over=5, requests=8)
    )
    assert c.verdict == "unproven" and c.restrictions == []
    assert c.reasons == ["TTFT p99 of the baseline: 10 requests, at least 299 needed"]
    assert (c.sentence or "").startswith("Unproven: not enough evidence.")


def test_a_failure_chance_explains_is_no_restriction() -> None:
    # The baseline held with 5 of 60 over; a condition with 1 of 2 over is no worse beyond chance
    # (Fisher's one-sided p = 0.16).
    c = claim(warm(over=5, requests=60), condition("content", "copy", "failed", 250.0, over=1, requests=2))
    assert c.verdict == "unproven" and c.restrictions == [] and "within chance" in c.reasons[0]


def test_a_cold_request_the_baseline_spread_explains_is_noted_not_restricting() -> None:
    c = claim(warm(requests=10), condition("cold", "first request", "failed", 250.0, over=1, requests=1))
    assert c.verdict == "holds" and c.restrictions == [] and "within the baseline's spread" in c.reasons[-1]
    beyond = claim(warm(requests=300), condition("cold", "first request", "failed", 250.0, over=1, requests=1))
    assert beyond.verdict == "holds_only_under" and beyond.restrictions == ["a warm server (the first request missed)"]


def test_a_condition_at_another_prompt_length_is_not_attributed_to_its_factor() -> None:
    content = condition("content", "natural", "failed", 400.0, over=200, requests=300)
    content.figures["prompt_tokens_mean"] = 475.0
    base = warm()
    base.figures["prompt_tokens_mean"] = 150.0
    c = claim(base, content)
    assert c.verdict == "unproven" and c.restrictions == []  # prompt length, not content, may explain it


def test_the_cache_is_judged_against_the_other_cache_condition() -> None:
    busted = condition("cache", "busted", "failed", 400.0, over=200, requests=300)
    shared = condition("cache", "shared_prefix", "failed", 390.0, over=190, requests=300)
    c = claim(warm(), busted, shared)
    assert c.verdict == "unproven" and c.restrictions == []  # both slow alike: the length, not the cache
    shared_fast = condition("cache", "shared_prefix", "held", 90.0)
    c = claim(warm(), busted, shared_fast)
    assert c.verdict == "holds_only_under" and c.restrictions == ["prompts whose prefix is cached"]


def test_half_the_requests_failing_is_the_reason() -> None:
    c = claim(condition("warm", 1, "held", figures={"error_rate": 0.5}))
    assert c.verdict == "fails" and c.reasons == ["the server failed 50 % of the baseline's requests"]


def test_no_baseline_no_verdict() -> None:
    c = claim(condition("warm", 1, None, skipped="interrupted"))
    assert c.verdict is None and "No verdict" in (c.sentence or "")
