"""claim.json: the verdict on a claim, the expectations, every condition with its figures, and the limits."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tokenrace.model.objectives import SavedCheck, SavedObjective

CLAIM_FILE = "claim.json"
Verdict = Literal["holds", "holds_only_under", "fails"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Condition(_Model):
    """One condition of the battery: what was varied, to what, the figures, and whether every
    expectation held (None: not measured; `skipped` then says why)."""

    dimension: Literal["cold", "warm", "concurrency", "prompt_tokens", "cache", "content", "drift", "quality"]
    value: Any = None
    held: bool | None = None
    figures: dict[str, Any] = Field(default_factory=dict)
    checks: list[SavedCheck] = Field(default_factory=list)
    run_dir: str | None = None
    skipped: str | None = None
    note: str | None = None


class Limits(_Model):
    concurrency: int | None = None  # the highest concurrency at which every expectation held
    concurrency_certain: bool | None = None
    concurrency_failing: int | None = None  # the lowest at which one did not
    prompt_tokens: int | None = None  # the longest prompt at which every expectation held
    prompt_tokens_failing: int | None = None


class PlannedStep(_Model):
    dimension: str
    requests: int
    seconds: float
    usd: float | None = None
    max_concurrency: int | None = None  # the search's highest concurrency, lowered to fit the limits


class ClaimFile(_Model):
    schema_version: int = 1
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
    max_requests: int | None = None
    max_cost_usd: float | None = None
    expectations: list[SavedObjective]
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
    quality: dict[str, Any] | None = None  # reported beside the speed, never part of the verdict
