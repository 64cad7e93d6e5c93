"""The gateway configuration's schema: pydantic models, one per section of the YAML file.

Reading a file (with line numbers in its errors) is `config.load`; the keys the file names by
environment variable are read by `config.secrets`. This module imports nothing of the request path:
the request path (routing, runtime) depends on the schema, never the other way round; only the pure
header rules (`headers`) are shared, to check `forward_headers` entries.
"""

from __future__ import annotations

import math
import re
import ssl
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from tokenrace.gateway.headers import pattern_problem

RetryKind = Literal["connect", "disconnect", "429", "5xx", "timeout"]
DEFAULT_RETRY_ON: tuple[RetryKind, ...] = ("connect", "disconnect", "429", "5xx")
Policy = Literal["least_in_flight", "least_queue", "prefix_affinity", "scored"]
SCRAPED_POLICIES = ("least_queue", "scored")  # pools whose instances' /metrics is read
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class _Model(BaseModel):
    # extra="forbid": a misspelt key must fail loudly, not silently fall back to a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- backends ---------------------------------------------------------------------------


class TimeoutsConfig(_Model):
    """Seconds; null means no limit."""

    connect_s: float | None = Field(default=5.0, gt=0)
    first_byte_s: float | None = Field(default=120.0, gt=0)
    idle_s: float | None = Field(default=60.0, gt=0)
    total_s: float | None = Field(default=600.0, gt=0)


class BreakerConfig(_Model):
    """Open after `failures` consecutive failures, or when the error rate over the last `window_s`
    seconds (at least `min_requests` requests) reaches `error_rate`; stay open `open_s`, then let
    `probes` requests through (half-open): success closes, failure opens again."""

    failures: int = Field(default=5, ge=1)
    error_rate: float | None = Field(default=0.5, gt=0, le=1)
    window_s: float = Field(default=30.0, gt=0)
    min_requests: int = Field(default=20, ge=1)
    open_s: float = Field(default=30.0, gt=0)
    probes: int = Field(default=1, ge=1)


class MetricsConfig(_Model):
    """Where and how often the engine's Prometheus /metrics is read (only for `least_queue` pools).

    `url` defaults to the backend URL's origin + /metrics (vLLM, SGLang, llama.cpp with --metrics).
    A reading older than three intervals is stale."""

    url: str | None = None
    interval_s: float = Field(default=1.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must start with http:// or https:// and name a host")
        return value


class KVEventsConfig(_Model):
    """Where the engine publishes its KV-cache events (vLLM's `--kv-events-config`): its ZMQ PUB
    `endpoint` (`tcp://host:5557`), the `topic` it publishes under (a prefix: llm-d's
    `kv@<pod>@<model>` matches `kv`), and its ROUTER `replay_endpoint` for batches the gateway
    missed (null: none; a gap is then counted and the blocks stored in it stay unknown)."""

    endpoint: str
    topic: str = ""
    replay_endpoint: str | None = None
    replay_timeout_s: float = Field(default=2.0, gt=0)

    @field_validator("endpoint", "replay_endpoint")
    @classmethod
    def _zmq_endpoint(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(tcp://[^\s:]+:\d+|ipc://\S+)$", value):
            raise ValueError("must be a ZMQ endpoint to connect to: tcp://host:port or ipc://path")
        return value


class BackendConfig(_Model):
    url: str
    api_key_env: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: TimeoutsConfig = TimeoutsConfig()
    max_in_flight: int = Field(default=256, ge=1)
    breaker: BreakerConfig = BreakerConfig()
    metrics: MetricsConfig = MetricsConfig()
    kv_events: KVEventsConfig | None = None
    # https only: a PEM file of the CAs to trust for this backend, in place of the system's.
    ca_bundle: str | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must start with http:// or https:// and name a host")
        return value.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return _check_env_name(value)

    @field_validator("ca_bundle")
    @classmethod
    def _readable_bundle(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ssl.create_default_context(cafile=value)
            except (OSError, ssl.SSLError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise ValueError(f"cannot load {value} as a PEM CA bundle: {reason}") from None
        return value

    @model_validator(mode="after")
    def _bundle_for_https(self) -> BackendConfig:
        if self.ca_bundle is not None and not self.url.startswith("https://"):
            raise ValueError("ca_bundle is for https:// backends")
        return self

    @field_validator("headers")
    @classmethod
    def _no_auth_header(cls, value: dict[str, str]) -> dict[str, str]:
        if any(k.lower() in ("authorization", "api-key", "x-api-key") for k in value):
            raise ValueError("keys do not belong in the file: use api_key_env")
        return value


# --- routes ------------------------------------------------------------------------------


class AffinityConfig(_Model):
    """`prefix_affinity`: the key is the `header`'s value, else the prompt's first `prefix_chars`
    characters; no instance takes more than `load_factor` times the pool's mean load."""

    header: str | None = "X-Session-ID"
    prefix_chars: int = Field(default=256, ge=1)
    load_factor: float = Field(default=1.25, ge=1)


class ScorersConfig(_Model):
    """`scored`: the weight of each score (0 leaves it out). Each score is in [0, 1]."""

    prefix: float = Field(default=2.0, ge=0)
    queue: float = Field(default=1.0, ge=0)
    running: float = Field(default=0.0, ge=0)
    kv_cache: float = Field(default=1.0, ge=0)

    @model_validator(mode="after")
    def _some_weight(self) -> ScorersConfig:
        if not (self.prefix or self.queue or self.running or self.kv_cache):
            raise ValueError("give at least one scorer a weight above 0")
        return self


class TargetConfig(_Model):
    """One share of a route's traffic: a backend, or a pool of equal instances chosen by `policy`."""

    backend: str | list[str]
    weight: float = Field(default=1.0, ge=0)
    policy: Policy = "least_in_flight"
    affinity: AffinityConfig | None = None
    scorers: ScorersConfig | None = None
    # `scored`: the model's tokenizer.json (or the folder holding it and its tokenizer_config.json),
    # to tokenize a request's prompt for the prefix score.
    tokenizer: str | None = None

    @field_validator("backend")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("name at least one backend")
        return value

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_there(cls, value: str | None) -> str | None:
        if value is not None:
            path = Path(value)
            if not (path / "tokenizer.json").is_file() if path.is_dir() else not path.is_file():
                raise ValueError(f"no tokenizer.json at {value}")
        return value

    @model_validator(mode="after")
    def _affinity_for_affinity(self) -> TargetConfig:
        if self.affinity is not None and self.policy != "prefix_affinity":
            raise ValueError("affinity: applies only with policy: prefix_affinity")
        if (self.scorers is not None or self.tokenizer is not None) and self.policy != "scored":
            raise ValueError("scorers: and tokenizer: apply only with policy: scored")
        return self

    @property
    def names(self) -> list[str]:
        return [self.backend] if isinstance(self.backend, str) else list(self.backend)


class SLOConfig(_Model):
    """Limits the canary must stay within; a limit left out is not checked."""

    error_rate: float | None = Field(default=None, ge=0, le=1)
    ttft_p95_ms: float | None = Field(default=None, gt=0)
    tpot_p95_ms: float | None = Field(default=None, gt=0)
    e2e_p95_ms: float | None = Field(default=None, gt=0)


class MarginConfig(_Model):
    """How much worse than the baseline (same window) the canary may be."""

    error_rate: float = Field(default=0.01, ge=0, le=1)
    latency_ratio: float = Field(default=1.25, ge=1)
    latency_ms: float = Field(default=10.0, ge=0)


class CanaryConfig(_Model):
    backend: str | list[str]
    steps: list[float] = Field(default_factory=lambda: [1.0, 5.0, 25.0, 100.0], min_length=1)
    hold_s: float = Field(default=300.0, gt=0)
    window_s: float | None = Field(default=None, gt=0)
    min_requests: int = Field(default=20, ge=1)
    eval_interval_s: float = Field(default=1.0, gt=0)
    slo: SLOConfig = SLOConfig()
    margin: MarginConfig = MarginConfig()
    paused: bool = False

    @field_validator("steps")
    @classmethod
    def _ramp(cls, value: list[float]) -> list[float]:
        if any(not 0 < s <= 100 for s in value):
            raise ValueError("each step is a percentage in (0, 100]")
        if any(b <= a for a, b in zip(value, value[1:], strict=False)):
            raise ValueError("steps must increase")
        return value

    @property
    def names(self) -> list[str]:
        return [self.backend] if isinstance(self.backend, str) else list(self.backend)


class ShadowConfig(_Model):
    backend: str
    share: float = Field(default=0.05, gt=0, le=1)
    max_in_flight: int = Field(default=16, ge=1)


class RetryConfig(_Model):
    """Per backend: `attempts` tries in all, before any byte reached the client; then the next backend."""

    attempts: int = Field(default=2, ge=1)
    backoff_ms: float = Field(default=50.0, ge=0)
    max_backoff_ms: float = Field(default=2000.0, ge=0)
    retry_after_max_s: float = Field(default=5.0, ge=0)
    on: list[RetryKind] = Field(default_factory=lambda: list(DEFAULT_RETRY_ON))


def _header_entry(entry: str) -> str:
    problem = pattern_problem(entry)
    if problem is not None:
        raise ValueError(problem)
    return entry


HeaderEntry = Annotated[str, AfterValidator(_header_entry)]


class ForwardHeadersConfig(_Model):
    """Which client request headers go on to the route's backends (docs/gateway.md, "Headers").

    By default every end-to-end header does; with `allow`, only those it names. `deny` names
    headers that never do. An entry is a header name or a prefix ending in `*` (`openai-*`)."""

    allow: list[HeaderEntry] | None = None
    deny: list[HeaderEntry] = Field(default_factory=list)


class RouteConfig(_Model):
    model: str = Field(min_length=1)
    backends: list[TargetConfig] = Field(min_length=1)
    fallback: list[str] | None = None
    sticky_header: str | None = None
    retry: RetryConfig | None = None
    canary: CanaryConfig | None = None
    shadow: ShadowConfig | None = None
    forward_headers: ForwardHeadersConfig | None = None
    # A request header naming one of the route's backends sends the request there and nowhere else
    # (for tests and measurements; null: off). It is not forwarded.
    pin_header: str | None = None

    @field_validator("backends", mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        # `backends: [vllm, groq]` is shorthand for equal weights.
        if isinstance(value, list):
            return [{"backend": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("pin_header")
    @classmethod
    def _pin_header_name(cls, value: str | None) -> str | None:
        if value is not None:
            problem = "must be a header name" if value.endswith("*") else pattern_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _some_weight(self) -> RouteConfig:
        if sum(t.weight for t in self.backends) <= 0:
            raise ValueError("backends: at least one weight must be > 0")
        return self


# --- clients, admin, limits -------------------------------------------------------------


class RateLimitConfig(_Model):
    rps: float = Field(gt=0)
    burst: int | None = Field(default=None, ge=1)

    @property
    def capacity(self) -> int:
        return self.burst if self.burst is not None else max(1, math.ceil(self.rps))


class KeyConfig(_Model):
    """A secret given by environment variable name or by its SHA-256 (hex), never by value."""

    key_env: str | None = None
    key_sha256: str | None = None

    @field_validator("key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return _check_env_name(value)

    @field_validator("key_sha256")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        if value is not None and not _SHA256.match(value.lower()):
            raise ValueError("must be 64 hex digits (sha256sum of the key)")
        return value.lower() if value else value

    @model_validator(mode="after")
    def _exactly_one(self) -> KeyConfig:
        if (self.key_env is None) == (self.key_sha256 is None):
            raise ValueError("give exactly one of key_env or key_sha256")
        return self


class ClientKeyConfig(KeyConfig):
    name: str = Field(min_length=1)
    rate_limit: RateLimitConfig | None = None


class AuthConfig(_Model):
    required: bool = True
    keys: list[ClientKeyConfig] = Field(default_factory=list)
    rate_limit: RateLimitConfig | None = None

    @model_validator(mode="after")
    def _keys_when_required(self) -> AuthConfig:
        if self.required and not self.keys:
            raise ValueError("keys: list at least one client key, or set required: false")
        names = [k.name for k in self.keys]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"keys: duplicate name {dupes[0]!r}")
        return self


class LimitsConfig(_Model):
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    client_idle_s: float = Field(default=75.0, gt=0)
    client_body_s: float = Field(default=30.0, gt=0)
    client_write_s: float = Field(default=30.0, gt=0)


class ListenConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)


class LogConfig(_Model):
    level: Literal["debug", "info", "warning", "error"] = "info"
    requests: bool = False


class TelemetryConfig(_Model):
    """`otel: true` emits one OpenTelemetry span per request (the `otel` extra); the exporter is
    chosen by the standard OTEL_* environment variables."""

    otel: bool = False


class StateConfig(_Model):
    """State shared by several instances through Redis. The URL (which may hold a password) is read
    from the environment variable `redis_url_env`, never from the file."""

    redis_url_env: str
    key_prefix: str = Field(default="tokenrace:gateway", min_length=1)
    sync_interval_s: float = Field(default=0.25, gt=0, le=0.5)
    lease_s: float = Field(default=2.0, gt=0)
    timeout_s: float = Field(default=0.25, gt=0)

    @field_validator("redis_url_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        checked = _check_env_name(value)
        assert checked is not None
        return checked

    @model_validator(mode="after")
    def _lease_outlives_syncs(self) -> StateConfig:
        if self.lease_s < 4 * self.sync_interval_s:
            raise ValueError("lease_s must be at least 4 x sync_interval_s (the lease is renewed on each sync)")
        return self


class GatewayConfig(_Model):
    listen: ListenConfig = ListenConfig()
    backends: dict[str, BackendConfig] = Field(min_length=1)
    routes: list[RouteConfig] = Field(min_length=1)
    retry: RetryConfig = RetryConfig()
    auth: AuthConfig
    admin: KeyConfig | None = None
    limits: LimitsConfig = LimitsConfig()
    drain_s: float = Field(default=30.0, ge=0)
    log: LogConfig = LogConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    state: StateConfig | None = None

    def route(self, model: str) -> RouteConfig | None:
        return next((r for r in self.routes if r.model == model), None)


def _check_env_name(value: str | None) -> str | None:
    if value is not None and not _ENV_NAME.match(value):
        # The value is not echoed: it may be the key itself, pasted in the wrong place.
        raise ValueError(
            "must name an environment variable (letters, digits, _); put the key itself in the environment"
        )
    return value
