"""Reference profiles (`--profile NAME`): the workload and load of a public reference, so that a run
measures the way that reference does (docs/profiles.md, each with its source).

A profile only sets defaults: a flag given on the command line wins. The figures a profile's reference
defines are computed by figures/reference.py when a run names its profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenrace.errors import InvalidInput
from tokenrace.model.reference import Reference

AA_SOURCE = "https://artificialanalysis.ai/methodology/performance-benchmarking"
LLMPERF_SOURCE = "https://github.com/ray-project/llmperf-leaderboard (README, Run Configurations)"
ENDPOINTS_SOURCE = "https://github.com/mlcommons/endpoints (metrics_aggregator; endpoints_rules.md §4.1, §6.1)"

ENDPOINTS_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)  # a log2 grid of 7 points (the rules' minimum)


@dataclass(frozen=True, slots=True)
class Profile:
    """A reference's workload and load. None: the profile leaves that input to its own default."""

    name: str
    reference: Reference
    description: str
    source: str
    input_tokens: int | None = None
    output_tokens: int | None = None  # also max_tokens
    requests: int | None = None
    concurrency: int | None = None
    cache_bust: bool | None = None  # a fresh prompt every request: no prefix-cache reuse
    cold: bool | None = None
    concurrencies: tuple[int, ...] | None = None  # sweep: the fixed-concurrency points
    offline: bool = False  # sweep: add a point with every request in flight at once
    watch_requests: int = 1  # `tokenrace watch`: requests per scheduled run
    watch_per_day: int = 8  # `tokenrace watch`: runs a day (Artificial Analysis: 8, the parallel test 1)


def _aa(name: str, input_tokens: int, output_tokens: int, what: str, concurrency: int = 1, per_day: int = 8) -> Profile:
    return Profile(
        name=name,
        reference="aa",
        description=f"Artificial Analysis, {what}: ~{input_tokens:,} input and {output_tokens:,} output tokens, "
        f"{'one request at a time' if concurrency == 1 else f'{concurrency} requests at once'}, a fresh prompt "
        "each request",
        source=AA_SOURCE,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        requests=10 if concurrency == 1 else concurrency,
        concurrency=concurrency,
        cache_bust=True,
        cold=False,
        watch_requests=1 if concurrency == 1 else concurrency,
        watch_per_day=per_day,
    )


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        _aa("aa", 10_000, 1_500, "its default 10k workload"),
        _aa("aa-1k", 1_000, 1_000, "the 1k workload"),
        # Artificial Analysis runs the 100k workload weekly; one a day is the fewest a watch schedules.
        _aa("aa-100k", 100_000, 2_000, "the 100k workload", per_day=1),
        _aa(
            "aa-parallel", 1_000, 1_000, "the parallel test (10 requests of the 1k workload)", concurrency=10, per_day=1
        ),
        Profile(
            name="llmperf",
            reference="llmperf",
            description="LLMPerf leaderboard: 550 input and 150 output tokens, 150 requests, concurrency 5",
            source=LLMPERF_SOURCE,
            input_tokens=550,
            output_tokens=150,
            requests=150,
            concurrency=5,
            cold=False,
            watch_requests=150,
        ),
        Profile(
            name="endpoints",
            reference="endpoints",
            description="MLPerf Endpoints: fixed concurrencies 1, 2, 4, ... 64 and an offline point (a sweep); "
            "system tokens/s, tokens/s per user (1000 ÷ TPOT p90), TTFT p90",
            source=ENDPOINTS_SOURCE,
            concurrencies=ENDPOINTS_CONCURRENCIES,
            offline=True,
            cold=False,
        ),
    )
}


def profile(name: str) -> Profile:
    """The profile called `name`; InvalidInput for an unknown one."""
    found = PROFILES.get(name)
    if found is None:
        raise InvalidInput("profile", f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    return found
