"""The history index's row (`tokenrace runs`)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from tokenrace.model.base import _Model
from tokenrace.model.claim import Verdict


class HistoryRow(_Model):
    """One row of the SQLite run index (`tokenrace runs`); the columns are these fields, in order."""

    model_config = ConfigDict(extra="forbid")

    id: str
    path: str
    kind: Literal["run", "sweep", "profile", "claim"]
    parent_id: str | None = None
    name: str | None = None
    label: str | None = None
    endpoint: str | None = None
    provider: str | None = None
    model: str | None = None
    source: str | None = None
    version: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    concurrency: float | None = None
    rate: float | None = None
    requests: int | None = None
    error_rate: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    output_tokens_per_s: float | None = None
    cache_hit_rate: float | None = None
    steps: int | None = None
    knee: str | None = None
    verdict: Verdict | None = None  # a claim's: holds, holds_only_under, fails
    indexed_at: str


class WatchPoint(_Model):
    """One watch run's figures (`tokenrace watch`): its reference's P50s over the run's requests."""

    output_speed_tok_s: float | None = None  # aa: output speed; llmperf: per-request output throughput
    ttft_s: float | None = None
    e2e_100_tokens_s: float | None = None  # aa only
    requests: int = 0  # the succeeded requests behind the figures


class WatchSlot(_Model):
    """One slot of a watch's schedule, as the history keeps it."""

    due_at: str  # ISO time, UTC
    status: Literal["planned", "done", "failed", "missed", "skipped"]
    run_path: str | None = None
    usd: float | None = None  # what the run cost (its summary's, else the estimate)
    finished_at: str | None = None
    figures: WatchPoint | None = None
    note: str | None = None
