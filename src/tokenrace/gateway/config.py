"""The gateway's configuration: a pydantic schema, read from YAML with line numbers kept.

`load_config(path)` returns a validated `GatewayConfig` or raises `ConfigError`, whose lines read
like `gateway.yaml:12: routes[0].backends[1].weight: must be >= 0`. Secrets never live in the file:
backends name the environment variable that holds their key (`api_key_env`), client and admin keys
come from environment variables or are given as SHA-256 digests. `resolve_secrets` reads them.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tokenrace.errors import UsageError
from tokenrace.gateway.routing import Policy
from tokenrace.gateway.yamlpos import Path, YamlError, format_path, line_of, load_with_lines
from tokenrace.redact import Redactor

RetryKind = Literal["connect", "disconnect", "429", "5xx", "timeout"]
DEFAULT_RETRY_ON: tuple[RetryKind, ...] = ("connect", "disconnect", "429", "5xx")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ConfigError(UsageError):
    """An invalid gateway configuration. `problems` holds one located line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        more = f" (and {len(problems) - 1} more; `tokenrace gateway check` lists them)" if len(problems) > 1 else ""
        super().__init__(problems[0] + more)


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


class BackendConfig(_Model):
    url: str
    api_key_env: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: TimeoutsConfig = TimeoutsConfig()
    max_in_flight: int = Field(default=256, ge=1)
    breaker: BreakerConfig = BreakerConfig()
    metrics: MetricsConfig = MetricsConfig()
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


class TargetConfig(_Model):
    """One share of a route's traffic: a backend, or a pool of equal instances chosen by `policy`."""

    backend: str | list[str]
    weight: float = Field(default=1.0, ge=0)
    policy: Policy = "least_in_flight"
    affinity: AffinityConfig | None = None

    @field_validator("backend")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("name at least one backend")
        return value

    @model_validator(mode="after")
    def _affinity_for_affinity(self) -> TargetConfig:
        if self.affinity is not None and self.policy != "prefix_affinity":
            raise ValueError("affinity: applies only with policy: prefix_affinity")
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


class RouteConfig(_Model):
    model: str = Field(min_length=1)
    backends: list[TargetConfig] = Field(min_length=1)
    fallback: list[str] | None = None
    sticky_header: str | None = None
    retry: RetryConfig | None = None
    canary: CanaryConfig | None = None
    shadow: ShadowConfig | None = None

    @field_validator("backends", mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        # `backends: [vllm, groq]` is shorthand for equal weights.
        if isinstance(value, list):
            return [{"backend": v} if isinstance(v, str) else v for v in value]
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


# --- loading ----------------------------------------------------------------------------


def load_config(path: str | FsPath, env: Mapping[str, str] | None = None, check_env: bool = True) -> GatewayConfig:
    """Read, validate and cross-check a gateway YAML file. Raises ConfigError (located lines)."""
    name = str(path)
    try:
        text = FsPath(path).read_text()
    except OSError as exc:
        raise ConfigError([f"{name}: cannot read: {exc.strerror or exc}"]) from None
    return parse_config(text, name, os.environ if env is None else env, check_env)


def parse_config(
    text: str, name: str = "<config>", env: Mapping[str, str] | None = None, check_env: bool = True
) -> GatewayConfig:
    try:
        data, lines = load_with_lines(text)
    except YamlError as exc:
        raise ConfigError([_located(name, exc.line, str(exc))]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{name}:1: the file must be a mapping with backends: and routes:"])
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_pydantic_problems(exc, name, lines)) from None
    problems = [_located(name, line_of(p, lines), f"{format_path(p)}: {m}") for p, m in cross_check(config, data)]
    if check_env:
        problems += [
            _located(name, line_of(p, lines), f"{format_path(p)}: {m}") for p, m in missing_env(config, env or {})
        ]
    if problems:
        raise ConfigError(problems)
    return config


_SCRUB = Redactor()


def _located(name: str, line: int | None, message: str) -> str:
    # Values are echoed to help, but anything shaped like a key is masked.
    message = _SCRUB(message)
    return f"{name}:{line}: {message}" if line is not None else f"{name}: {message}"


def _pydantic_problems(exc: ValidationError, name: str, lines: dict[Path, int]) -> list[str]:
    out = []
    for err in exc.errors():
        path = _clean_loc(err["loc"])
        where = format_path(path)
        message = _friendly(err, path)
        out.append(_located(name, line_of(path, lines), f"{where}: {message}" if where else message))
    return out


def _clean_loc(loc: tuple[Any, ...]) -> Path:
    """pydantic adds union member names (`str`, `list[str]`) and validator tags to locations."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, int):
            out.append(part)
        elif isinstance(part, str) and not re.match(r"^(str|int|float|bool|list\[.*\]|dict\[.*\]|function-.*)$", part):
            out.append(part)
    return tuple(out)


_MISSING_HINTS: dict[Path, str] = {
    ("auth",): "required: list client keys (auth: {keys: [{name: app, key_env: APP_API_KEY}]}), "
    "or write `auth: {required: false}` to serve without them",
}


def _friendly(err: Any, path: Path) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return _MISSING_HINTS.get(path, "required")
    if kind == "extra_forbidden":
        options = _fields_at(path[:-1])
        close = difflib.get_close_matches(str(path[-1]), options, n=1, cutoff=0.6) if options else []
        hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(options)}"
        return f"unknown key ({hint})"
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"must be {bounds[kind]} {limit:g} (got {value!r})"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer (got {value!r})"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {value!r})"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {value!r})"
    if kind == "string_type":
        return f"must be text (got {value!r})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping (got {value!r})"
    if kind == "list_type":
        return f"must be a list (got {value!r})"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')} (got {value!r})"
    if kind == "too_short":
        return "must not be empty"
    return str(err["msg"]).removeprefix("Value error, ")


def cross_check(config: GatewayConfig, data: dict[str, Any]) -> list[tuple[Path, str]]:
    """References between sections: every named backend exists, models are unique, and so on."""
    problems: list[tuple[Path, str]] = []
    known = set(config.backends)
    models: dict[str, int] = {}
    for i, route in enumerate(config.routes):
        here: Path = ("routes", i)
        if route.model in models:
            problems.append((here + ("model",), f"{route.model!r} is already routed by routes[{models[route.model]}]"))
        models.setdefault(route.model, i)
        problems += _unknown_backends(route, here, known)
        if route.canary is not None:
            baseline = {n for t in route.backends for n in t.names}
            overlap = sorted(baseline & set(route.canary.names))
            if overlap:
                problems.append(
                    (here + ("canary", "backend"), f"{overlap[0]!r} is also a baseline backend of this route")
                )
    return problems


def _unknown_backends(route: RouteConfig, here: Path, known: set[str]) -> list[tuple[Path, str]]:
    refs: list[tuple[Path, str]] = []
    for j, target in enumerate(route.backends):
        if isinstance(target.backend, str):
            refs.append((here + ("backends", j, "backend"), target.backend))
        else:
            refs += [(here + ("backends", j, "backend", k), n) for k, n in enumerate(target.backend)]
    refs += [(here + ("fallback", k), n) for k, n in enumerate(route.fallback or [])]
    if route.canary is not None:
        names = route.canary.names
        refs += [(here + ("canary", "backend") + ((k,) if len(names) > 1 else ()), n) for k, n in enumerate(names)]
    if route.shadow is not None:
        refs.append((here + ("shadow", "backend"), route.shadow.backend))
    hint = ", ".join(sorted(known))
    return [(p, f"unknown backend {n!r} (defined: {hint})") for p, n in refs if n not in known]


def missing_env(config: GatewayConfig, env: Mapping[str, str]) -> list[tuple[Path, str]]:
    """Environment variables the file names but the environment lacks (or holds empty)."""
    wanted: list[tuple[Path, str]] = []
    for name, backend in config.backends.items():
        if backend.api_key_env:
            wanted.append((("backends", name, "api_key_env"), backend.api_key_env))
    for i, key in enumerate(config.auth.keys):
        if key.key_env:
            wanted.append((("auth", "keys", i, "key_env"), key.key_env))
    if config.admin is not None and config.admin.key_env:
        wanted.append((("admin", "key_env"), config.admin.key_env))
    if config.state is not None:
        wanted.append((("state", "redis_url_env"), config.state.redis_url_env))
    return [(p, f"environment variable {v} is not set") for p, v in wanted if not env.get(v)]


def _check_env_name(value: str | None) -> str | None:
    if value is not None and not _ENV_NAME.match(value):
        # The value is not echoed: it may be the key itself, pasted in the wrong place.
        raise ValueError(
            "must name an environment variable (letters, digits, _); put the key itself in the environment"
        )
    return value


# --- secrets ----------------------------------------------------------------------------


class Secret:
    """A key that cannot leak by accident: repr/str show ***; `reveal()` is the only way in."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__


def sha256_hex(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Secrets:
    """Keys read from the environment: upstream keys by backend, client key digests by key name."""

    upstream: dict[str, Secret] = field(default_factory=dict)
    client_digests: dict[str, str] = field(default_factory=dict)  # digest -> key name
    admin_digest: str | None = None
    state_url: Secret | None = None  # the Redis URL: it may carry a password

    def values(self) -> list[str]:
        """Every secret value, for a Redactor."""
        out = [s.reveal() for s in self.upstream.values()]
        return out + ([self.state_url.reveal()] if self.state_url is not None else [])


def resolve_secrets(config: GatewayConfig, env: Mapping[str, str]) -> Secrets:
    """Read the keys the config names. Raises ConfigError if one is missing."""
    missing = missing_env(config, env)
    if missing:
        raise ConfigError([f"{format_path(p)}: {m}" for p, m in missing])
    upstream = {n: Secret(env[b.api_key_env]) for n, b in config.backends.items() if b.api_key_env}
    digests = {_digest_of(k, env): k.name for k in config.auth.keys}
    admin = _digest_of(config.admin, env) if config.admin is not None else None
    return Secrets(upstream, digests, admin, _state_url(config, env))


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _state_url(config: GatewayConfig, env: Mapping[str, str]) -> Secret | None:
    if config.state is None:
        return None
    name = config.state.redis_url_env
    url = env[name]
    if not url.startswith(REDIS_SCHEMES):
        # The value is not echoed: it may hold a password.
        raise ConfigError([f"state.redis_url_env: {name} must hold a redis://, rediss:// or unix:// URL"])
    return Secret(url)


def _digest_of(key: KeyConfig, env: Mapping[str, str]) -> str:
    if key.key_sha256 is not None:
        return key.key_sha256
    assert key.key_env is not None
    return sha256_hex(env[key.key_env])


def _fields_at(path: Path) -> list[str]:
    """The keys allowed at `path` of the schema (for "did you mean" hints)."""
    node: Any = GatewayConfig
    for part in path:
        node = _step(node, part)
        if node is None:
            return []
    model = _model_in(node)
    return list(model.model_fields) if model is not None else []


def _step(node: Any, part: str | int) -> Any:
    model = _model_in(node)
    if model is not None:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        return info.annotation if info is not None else None
    containers = [node, *get_args(node)]
    for candidate in containers:
        if get_origin(candidate) in (list, dict):
            return get_args(candidate)[-1]
    return None


def _model_in(node: Any) -> type[BaseModel] | None:
    if isinstance(node, type) and issubclass(node, BaseModel):
        return node
    if get_origin(node) not in (Union, UnionType):
        return None
    for arg in get_args(node):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
