"""The history index's row (`tokenrace runs`)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from tokenrace.model.base import _Model


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
    verdict: str | None = None  # a claim's: holds, holds_only_under, fails
    indexed_at: str
