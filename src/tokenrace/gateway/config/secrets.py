"""The keys a gateway configuration names: read from the environment, never from the file.

Backends name the environment variable that holds their key (`api_key_env`); client and admin keys
come from environment variables or are given as SHA-256 digests; the Redis URL (which may hold a
password) comes from `state.redis_url_env`. `resolve_secrets` reads them all into `Secrets`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from tokenrace.gateway.config.load import ConfigError, missing_env
from tokenrace.gateway.config.schema import GatewayConfig, KeyConfig
from tokenrace.gateway.yamlpos import format_path


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
