"""An OpenAI-compatible gateway: route by model name, split and canary with automatic rollback,
retry and fall back before the first byte, end broken streams with an error event, and measure all
of it (docs/gateway.md)."""

from tokenrace.gateway.app import Gateway, build_handler, from_file
from tokenrace.gateway.config import ConfigError, GatewayConfig, load_config, parse_config, resolve_secrets

__all__ = [
    "ConfigError",
    "Gateway",
    "GatewayConfig",
    "build_handler",
    "from_file",
    "load_config",
    "parse_config",
    "resolve_secrets",
]
