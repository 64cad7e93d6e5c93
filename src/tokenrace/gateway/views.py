"""The gateway's state as typed models: what GET /admin/state shows, what instances share through
Redis, and the canary's decisions with the numbers behind them.

They are built where the state lives (breaker, canary, routing, runtime, shadow, shared) and turn into
JSON only at the edge (`View.to_json`); a view read back (a worker's peer, a Redis record) is
validated into the same model. A key that is shown only in some cases (a pool's `routing`, a scraped
backend's `load`) is a field with a default that is left unset when it does not apply: `to_json`
writes the fields that were set, so every answer keeps its shape, and a figure that applies but is
undefined is set to None and shows as null.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_serializer

from tokenrace.model.stats import Percentiles

BreakerState: TypeAlias = Literal["closed", "open", "half_open"]
CanaryState: TypeAlias = Literal["running", "paused", "rolled_back", "promoted"]
Action: TypeAlias = Literal["start", "advance", "promote", "rollback", "hold", "pause", "resume"]
Latency: TypeAlias = Literal["ttft", "tpot", "e2e"]


class View(BaseModel):
    """A JSON shape the gateway writes: exactly the fields that were set, under their JSON names.
    Read back (a peer's view, another instance's record), keys a newer version adds are ignored."""

    model_config = ConfigDict(extra="ignore", validate_by_name=True, validate_by_alias=True)

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(by_alias=True, exclude_unset=True))


# --- breakers -------------------------------------------------------------------------------------


class BreakerWindow(View):
    seconds: float
    requests: int
    errors: int
    error_rate: float | None


class BreakerView(View):
    state: BreakerState
    reason: str | None
    since_unix: float
    open_until_unix: float | None
    consecutive_failures: int
    window: BreakerWindow


class BreakerRecord(View):
    """A breaker's state as instances share it (wall-clock times); `by` is the instance that wrote it."""

    state: BreakerState
    reason: str
    since_unix: float
    open_until_unix: float | None
    by: str | None = None


# --- canaries -------------------------------------------------------------------------------------


class ArmStats(View):
    """Counts, error rate and p95 latencies (ms) of one arm's window; undefined figures are None."""

    requests: int
    errors: int
    error_rate: float | None
    error_rate_low95: float | None
    ttft_samples: int
    ttft_p95_ms: float | None
    tpot_samples: int
    tpot_p95_ms: float | None
    e2e_samples: int
    e2e_p95_ms: float | None

    def latency(self, name: Latency) -> tuple[int, float | None]:
        """(samples, p95 in ms) of one latency."""
        if name == "ttft":
            return self.ttft_samples, self.ttft_p95_ms
        if name == "tpot":
            return self.tpot_samples, self.tpot_p95_ms
        return self.e2e_samples, self.e2e_p95_ms


class Check(View):
    """One canary check: pass (point estimate within the limit; None = no data) and breach (rollback)."""

    check: str
    value: float | None
    low95: float | None = None  # error-rate checks: the Wilson lower bound
    limit: float
    passed: bool | None = Field(validation_alias="pass", serialization_alias="pass")
    breach: bool
    why: str


class Evaluation(View):
    """One evaluation of the canary's window against its SLOs and the baseline."""

    window_s: float
    step: int
    weight_pct: float
    canary: ArmStats
    baseline: ArmStats
    checks: list[Check]


class NoNumbers(View):
    """The numbers of a decision no evaluation led to (start, pause, resume): `{}`."""

    model_config = ConfigDict(extra="forbid")  # an evaluation is never read as no numbers


class Decision(View):
    """One canary decision, with the numbers that caused it, as shown, logged and shared."""

    model_config = ConfigDict(frozen=True)

    at_unix: float
    action: Action
    from_weight: float = Field(validation_alias="from_weight_pct", serialization_alias="from_weight_pct")
    to_weight: float = Field(validation_alias="to_weight_pct", serialization_alias="to_weight_pct")
    reason: str
    by: str
    numbers: Evaluation | NoNumbers
    instance: str | None  # the gateway instance that took it, when instances share state

    @field_serializer("at_unix")
    def _to_the_ms(self, at_unix: float) -> float:
        return round(at_unix, 3)


class CanaryView(View):
    state: CanaryState
    weight_pct: float
    step: int
    steps_pct: list[float]
    step_age_s: float
    hold_s: float
    window_s: float
    min_requests: int
    last_evaluation: Evaluation | None
    decisions: list[Decision]
    backend: str | None = None  # /admin/state: the canary's backend(s)


class CanaryRecord(View):
    """Where a canary's ramp stands, as the lease holder shares it (wall-clock times)."""

    state: CanaryState
    step: int
    weight: float
    step_started_unix: float
    held_logged: bool


class CanaryReply(View):
    """The answer to POST /admin/canary/...: the decision taken and where the canary stands."""

    route: str
    decision: Decision
    canary: CanaryView


# --- routes ---------------------------------------------------------------------------------------


class LastChoice(View):
    """A pool's last choice and its inputs: each instance's queue estimate (least_queue), or the
    key's hash and ring position (prefix_affinity)."""

    backend: str
    reason: str
    detail: str | None
    queue: dict[str, float | None] | None = None
    scores: dict[str, float | None] | None = None
    key_hash: str | None = None
    ring_position: float | None = None


class AffinityView(View):
    header: str | None
    prefix_chars: int
    load_factor: float


class RoutingView(View):
    """How a pool chooses: its policy, the choices per instance and reason, and the policy's figures."""

    policy: str
    counts: dict[str, dict[str, int]]
    last: LastChoice | None
    affinity: AffinityView | None = None
    ring_share: dict[str, float] | None = None
    moved: int | None = None
    keys_remembered: int | None = None  # null: the pool (or a worker's copy of it) keeps no placements
    queue_estimate: dict[str, float | None] | None = None
    scorers: dict[str, float] | None = None  # `scored`: the weight of each score
    tokenizer: str | None = None  # `scored`: the tokenizer.json a request's prompt is tokenized with


class TargetView(View):
    backends: list[str]
    weight: float | None = None  # the route's own targets
    canary: bool | None = None  # the canary's target: true
    share: float
    routing: RoutingView | None = None  # pools of more than one instance


class ShadowView(View):
    backend: str
    share: float
    in_flight: int
    recent: int
    ok: int
    ttft_ms: Percentiles
    duration_ms: Percentiles
    agreement_mean: float | None
    exact_match_rate: float | None


class RouteView(View):
    targets: list[TargetView]
    fallback: list[str]
    sticky_header: str | None
    canary: CanaryView | None
    shadow: ShadowView | None


# --- backends and the whole gateway ------------------------------------------------------------------


class LoadView(View):
    """A scraped backend's latest /metrics reading (`reading: null` before the first one)."""

    url: str
    interval_s: float
    reading: None = None
    engine: str | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    running: float | None = None
    age_s: float | None = None
    error: str | None = None


class KVEventsView(View):
    """What a backend's KV-event subscription has learned: the blocks it holds and the stream's health."""

    endpoint: str
    topic: str
    blocks: int  # whole blocks the instance holds now (chain keys)
    block_size: int | None
    batches: int  # event batches applied
    last_seq: int | None
    gaps: int  # jumps in the sequence numbers
    replayed: int  # batches recovered from the replay socket
    missed: int  # batches lost for good (no replay socket, or beyond its buffer)
    restarts: int  # the sequence started over: the engine restarted, its blocks were dropped
    cleared: int  # AllBlocksCleared events and restarts
    orphans: int  # stored blocks whose parent was never seen
    skipped: int  # stored blocks with a LoRA or extra keys (not indexed)
    bad: int  # messages that were not KV-event batches


class BackendView(View):
    url: str
    in_flight: int
    max_in_flight: int
    breaker: BreakerView
    load: LoadView | None = None  # backends of least_queue and scored pools
    kv_events: KVEventsView | None = None  # backends with `kv_events:`


class SharedView(View):
    """The state backend: this process's memory, or Redis (without its URL: it may hold a password)."""

    backend: Literal["memory", "redis"]
    up: bool | None
    instance: str | None = None
    key_prefix: str | None = None
    canary_leader: bool | None = None
    lease_holder: str | None = None
    fallbacks: int | None = None
    last_error: str | None = None
    shared_by: str | None = None  # workers: who shares it


class ConfigView(View):
    path: str | None
    generation: int
    loaded_unix: float
    last_reload_error: str | None


class WorkerView(View):
    """One worker in the merged state; only `index` and `answered: false` when it did not answer."""

    index: int
    answered: bool
    pid: int | None = None
    started_unix: float | None = None
    generation: int | None = None
    last_reload_error: str | None = None
    draining: bool | None = None
    in_flight: int | None = None
    answered_requests: int | None = None


class GatewayState(View):
    """GET /admin/state."""

    version: str
    pid: int
    started_unix: float
    draining: bool
    config: ConfigView
    state: SharedView
    backends: dict[str, BackendView]
    routes: dict[str, RouteView]
    answered_requests: int | None = None  # a worker's own view: the client requests it answered
    workers: list[WorkerView] | None = None  # merged over workers: each one
    answered_by: int | None = None  # merged over workers: the one that answered


class ModelEntry(View):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(View):
    """GET /v1/models."""

    object: Literal["list"]
    data: list[ModelEntry]
