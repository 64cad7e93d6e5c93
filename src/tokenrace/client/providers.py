"""Provider presets and endpoint resolution (base URL + where the key comes from).

`--url` takes a base URL the way the OpenAI SDK does (`http://localhost:8000/v1`,
`https://api.groq.com/openai/v1`); a bare `http://host:port` gets `/v1` appended.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from tokenrace.engines import ENGINES
from tokenrace.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    base_url: str
    key_env: str | None  # env var holding the key; None: no key needed
    engine: str  # what serves it, for the manifest
    api: str = "chat"  # the API a run uses there unless --api says otherwise


# Each base URL and key variable as the vendor's own documentation gives it. Cerebras: its
# Inference docs (inference-docs.cerebras.ai: base URL https://api.cerebras.ai/v1, key
# CEREBRAS_API_KEY). SambaNova: "API keys and URLs" (docs.sambanova.ai/docs/en/get-started/api-keys-urls:
# base URL https://api.sambanova.ai/v1) and its official Python library (pypi.org/project/sambanova:
# the key from SAMBANOVA_API_KEY).
HOSTED_PROVIDERS = (
    Provider("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY", "groq"),
    Provider("cerebras", "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY", "cerebras"),
    Provider("sambanova", "https://api.sambanova.ai/v1", "SAMBANOVA_API_KEY", "sambanova"),
    Provider("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", "openai"),
    Provider("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY", "together"),
    Provider("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", "openrouter"),
    Provider("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY", "fireworks"),
    Provider("anthropic", "https://api.anthropic.com/v1", "ANTHROPIC_API_KEY", "anthropic", api="messages"),
)
# The key variable an API's own clients read, tried before OPENAI_API_KEY (Anthropic's SDK reads this).
API_KEY_ENV = {"messages": "ANTHROPIC_API_KEY"}
# A local engine on its default port (tokenrace.engines), e.g. `--provider sglang` -> localhost:30000.
ENGINE_PROVIDERS = tuple(
    Provider(e.name, f"http://localhost:{e.default_port}/v1", e.key_env, e.name)
    for e in ENGINES.values()
    if e.default_port is not None
)
PROVIDERS: dict[str, Provider] = {p.name: p for p in (*HOSTED_PROVIDERS, *ENGINE_PROVIDERS)}
HOSTED_NAMES = frozenset(p.name for p in HOSTED_PROVIDERS)
# A hosted API's host -> its provider name (api.groq.com -> groq).
HOSTED_HOSTS: dict[str, str] = {urlsplit(p.base_url).hostname or "": p.name for p in HOSTED_PROVIDERS}


def hosted_provider(base_url: str, provider: str | None = None) -> str | None:
    """The hosted API `base_url` points at (by the preset's name, else by its host or a subdomain of
    it), or None for a self-hosted server."""
    if provider and provider.lower() in HOSTED_NAMES:
        return provider.lower()
    host = urlsplit(base_url).hostname or ""
    return next((name for domain, name in HOSTED_HOSTS.items() if host == domain or host.endswith(f".{domain}")), None)


def normalize_base_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput("url", f"must look like http://host:port/v1, got {url!r}")
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/responses", "/messages", "/embeddings", "/rerank"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    if path == "":
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


@dataclass(frozen=True, slots=True)
class ResolvedEndpoint:
    base_url: str
    api_key: str | None
    key_source: str | None  # "--api-key" or the env var's name: shown in errors, never the key
    provider: str | None


def provider_api(provider: str | None) -> str | None:
    """The API a preset provider is spoken to in (`anthropic`: messages); None without a preset."""
    preset = PROVIDERS.get(provider.lower()) if provider else None
    return preset.api if preset is not None else None


def resolve_endpoint(
    url: str | None, api_key: str | None, provider: str | None, api: str = "chat"
) -> ResolvedEndpoint | None:
    """Flags beat the provider preset, which beats OPENAI_BASE_URL / OPENAI_API_KEY.

    The key: --api-key, else the preset's variable, else the API's own (ANTHROPIC_API_KEY for
    messages, which never falls back to OPENAI_API_KEY: an OpenAI key is not sent to another
    vendor's API), else OPENAI_API_KEY. Returns None when nothing names an endpoint (the caller then
    starts the embedded engine).
    """
    preset = None
    if provider:
        preset = PROVIDERS.get(provider.lower())
        if preset is None:
            raise InvalidInput("provider", f"unknown provider {provider!r}; known: {', '.join(sorted(PROVIDERS))}")
    base = url or (preset.base_url if preset else None) or os.environ.get("OPENAI_BASE_URL")
    if not base:
        return None
    key, source = api_key, "--api-key" if api_key else None
    if key is None and preset is not None and preset.key_env:
        key, source = os.environ.get(preset.key_env), preset.key_env
    own_env = API_KEY_ENV.get(api)
    if key is None and own_env is not None and os.environ.get(own_env):
        key, source = os.environ[own_env], own_env
    if key is None and own_env is None and os.environ.get("OPENAI_API_KEY"):
        key, source = os.environ["OPENAI_API_KEY"], "OPENAI_API_KEY"
    if key is None and preset is not None and preset.key_env:
        source = preset.key_env  # tried, empty: the preflight's 401 message names it
    elif key is None and own_env is not None:
        source = own_env
    return ResolvedEndpoint(normalize_base_url(base), key or None, source, preset.name if preset else None)
