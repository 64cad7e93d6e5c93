"""What the client reads from a response into its record (tokenrace.model.records.RequestRecord)."""

from __future__ import annotations

from typing import Any

from tokenrace.model.records import CacheSource


def cached_tokens_of(usage: Any, timings: Any) -> tuple[int | None, CacheSource | None]:
    """(cached prompt tokens, source) from a response's `usage` and engine `timings`.

    `usage.prompt_tokens_details.cached_tokens` (OpenAI, vLLM, SGLang) is trusted first, as usage is
    for every token count; llama.cpp's `timings.cache_n` (prompt tokens reused from the slot's cache)
    second. A server that reports neither leaves the count unknown (None), never 0: vLLM sends
    `"prompt_tokens_details": null` unless started with --enable-prompt-tokens-details.
    """
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if _count(cached):
        return cached, "usage"
    cache_n = timings.get("cache_n") if isinstance(timings, dict) else None
    if _count(cache_n):
        return cache_n, "engine"
    return None, None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
