"""claim.json: the verdict on a claim, the expectations, every condition with its figures and checks,
and the limits (docs/claim.md). Filled by `claim/`; read by the report, `show` and the history."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, with_config
from typing_extensions import TypedDict

from tokenrace.model.base import _Model
from tokenrace.model.quality import Accuracy, Score

CLAIM_FILE = "claim.json"
CLAIM_SCHEMA_VERSION = 1
Verdict = Literal["holds", "holds_only_under", "fails", "unproven"]
Dimension = Literal[
    "cold", "warm", "concurrency", "prompt_tokens", "cache", "content", "compliance", "drift", "quality"
]


class Expectation(_Model):
    """One expectation as the user wrote it (`text`) and as it was parsed."""

    figure: str | None = None
    stat: str | None = None  # None for a share or a whole-run rate
    op: Literal["<=", "<", ">=", ">"] | None = None
    limit: float | None = None  # in the figure's base unit (ms, tok/s, req/s, a share in [0, 1])
    text: str
    guard: bool = False  # the error rate added to every condition: it decides, it is never unclear
    attainment: float | None = None  # `ttft<=300ms@99%`: the share of requests that must meet the limit


Outcome = Literal["held", "failed", "unproven"]


class ConditionCheck(_Model):
    """One expectation judged on one condition's requests (docs/claim.md, "Three outcomes"): the
    figure and its one-sided bounds at `confidence` (null: open, the requests cannot bound that side),
    whether the figure itself meets the limit (`held`; null: undefined, no request succeeded), and the
    outcome: `held` or `failed` when a bound clears the limit, `unproven` when neither does. `over`
    counts the requests on the wrong side of the limit; `needed` is how many requests in all would
    show the expectation held if no more went over."""

    objective: str
    name: str
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    held: bool | None = None
    clear: bool = False  # decided: outcome is held or failed
    outcome: Outcome | None = None
    confidence: float | None = None
    requests: int | None = None
    over: int | None = None
    needed: int | None = None


class DriftRatios(_Model):
    """The drift condition's figures over the baseline's (after / before)."""

    ttft_ms_p50: float | None = None
    tpot_ms_p50: float | None = None
    e2e_ms_p50: float | None = None
    output_tok_s: float | None = None


class ComplianceFigures(_Model):
    """A compliance condition's figures (docs/claim.md, "Compliance"; docs/metrics.md). Each check
    fills its own; the others stay null."""

    answers: int | None = None  # answers judged
    # TEST06: answers whose reported count disagrees with the streamed one, or that ended more than
    # once; their share of `answers`, with its exact one-sided bounds
    disagreeing: int | None = None
    undecidable: int | None = None  # token count: answers the streamed chunks cannot judge
    share: float | None = None
    share_low: float | None = None
    share_high: float | None = None
    reported_tokens_mean: float | None = None  # tokens per answer, as usage reports them
    streamed_tokens_mean: float | None = None  # tokens per answer, as counted from the stream
    finishes_max: int | None = None  # the most finish events one answer carried
    # TEST09: output tokens per answer over the max_tokens asked (with --ignore-eos), a mean
    output_tokens_mean: float | None = None
    asked_tokens_mean: float | None = None
    length_ratio: float | None = None
    length_ratio_low: float | None = None
    length_ratio_high: float | None = None
    # TEST04: how many times faster the same prompt repeated is than distinct prompts of the same
    # length (distinct p50 / repeated p50; over 1: faster), TPOT judged, TTFT and E2E shown
    repeated: int | None = None  # requests with the repeated prompt
    distinct: int | None = None  # the baseline's, with distinct prompts
    speedup_tpot_p50: float | None = None
    speedup_tpot_low: float | None = None
    speedup_tpot_high: float | None = None
    speedup_ttft_p50: float | None = None
    speedup_e2e_p50: float | None = None


@with_config({"extra": "allow"})
class ConditionFigures(TypedDict, total=False):
    """A condition's key figures. Each condition has the keys it measured and no others (the cold
    request has no percentiles, a search step no p99, the quality pass only its accuracy), so this is a
    typed dict that keeps exactly the keys it was given, where a model would write the others as null."""

    requests: int | None
    error_rate: float | None
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    e2e_ms_p50: float | None
    output_tok_s_per_user_p50: float | None  # 1000 / TPOT p50
    output_tok_s: float | None
    prompt_tokens_mean: float | None
    ttft_ms: float | None  # the cold request's own
    e2e_ms: float | None
    error_kind: str | None
    vs_warm: DriftRatios  # drift: after / before
    accuracy: Accuracy  # the quality pass
    right: int
    wrong: int
    compliance: ComplianceFigures  # a compliance condition's


class Condition(_Model):
    """One condition of the battery: what was varied, to what, the figures, whether every
    expectation's figure met its limit as measured (`held`; None: not measured, `skipped` then says
    why), and what the evidence shows (`outcome`): `failed` when some check failed with certainty,
    `held` when every check held with certainty, `unproven` otherwise."""

    dimension: Dimension
    value: int | float | str | None = None
    held: bool | None = None
    outcome: Outcome | None = None
    figures: ConditionFigures = Field(default_factory=ConditionFigures)
    checks: list[ConditionCheck] = Field(default_factory=list)
    run_dir: str | None = None
    runs: list[str] = Field(default_factory=list)  # every run pooled into the checks, in order (run_dir first)
    skipped: str | None = None
    note: str | None = None


class Limits(_Model):
    concurrency: int | None = None  # the highest concurrency at which every expectation held
    concurrency_certain: bool | None = None
    concurrency_failing: int | None = None  # the lowest at which one did not
    prompt_tokens: int | None = None  # the longest prompt at which every expectation held
    prompt_tokens_failing: int | None = None


class PlannedStep(_Model):
    dimension: Dimension
    requests: int
    seconds: float
    needed: int | None = None  # requests that could decide one of its conditions (none over a limit)
    usd: float | None = None
    max_concurrency: int | None = None  # the search's highest concurrency, lowered to fit the limits


class ClaimQuality(_Model):
    """The quality pass's scores, reported beside the speed and never part of the verdict."""

    overall: Score
    suites: dict[str, Score] = Field(default_factory=dict)


class ClaimFile(_Model):
    schema_version: int = CLAIM_SCHEMA_VERSION
    kind: Literal["claim"] = "claim"
    tool: str = "tokenrace"
    version: str | None = None
    endpoint: str | None = None
    provider: str | None = None
    model: str | None = None
    directory: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    budget_s: float
    confidence: float | None = None  # each verdict's; a condition's checks split it between their looks
    max_requests: int | None = None
    max_cost_usd: float | None = None
    expectations: list[Expectation]
    plan: list[PlannedStep] = Field(default_factory=list)
    verdict: Verdict | None = None
    sentence: str | None = None
    reasons: list[str] = Field(default_factory=list)
    restrictions: list[str] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    partial: bool = False  # interrupted: the verdict covers the conditions finished
    requests_sent: int = 0
    elapsed_s: float | None = None
    quality: ClaimQuality | None = None  # reported beside the speed, never part of the verdict
