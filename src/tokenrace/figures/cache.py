"""Prefix-cache accounting: how much of the prompt the server did not have to compute.

A request's `cached_tokens` comes from `usage.prompt_tokens_details.cached_tokens` (OpenAI, vLLM,
SGLang) or from llama.cpp's `timings.cache_n`, and says which. The run's hit rate is cached ÷ prompt
tokens over the successful measured requests that reported both; None when none did (unknown, not 0).
The engine's own counters (vLLM's prefix-cache hits and queries) are read from two /metrics scrapes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tokenrace.engines import engine
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import Cache, RunWarning, ServerCache

# A hit rate above this, without cache busting, makes TTFT a measure of the cache rather than of prefill.
NOTABLE_HIT_RATE = 0.2


def source_of(records: Sequence[RequestRecord], attr: str) -> str | dict[str, int] | None:
    """One source name, {source: requests} when they were mixed, or None when none was recorded."""
    counts: Counter[str] = Counter(getattr(r, attr) for r in records if getattr(r, attr) is not None)
    if not counts:
        return None
    if len(counts) == 1:
        return next(iter(counts))
    return dict(counts)


def hit_rate(records: Sequence[RequestRecord]) -> tuple[float | None, int, int, int]:
    """(cached ÷ prompt tokens, cached tokens, prompt tokens, requests that reported both)."""
    both = [r for r in records if r.cached_tokens is not None and r.prompt_tokens]
    cached = sum(r.cached_tokens or 0 for r in both)
    prompt = sum(r.prompt_tokens or 0 for r in both)
    rate = round(cached / prompt, 6) if prompt else None
    return rate, cached, prompt, len(both)


def cache_section(records: Sequence[RequestRecord], busted: bool | None, server: ServerCache | None) -> Cache | None:
    """The summary's `cache`, or None when neither the responses nor the engine said anything."""
    rate, cached, prompt, n = hit_rate(records)
    if n == 0 and server is None:
        return None
    return Cache(
        hit_rate=rate,
        cached_tokens=cached if n else None,
        prompt_tokens=prompt if n else None,
        requests_reporting=n,
        source=source_of(records, "cached_tokens_source"),
        busted=busted,
        server=server,
    )


def cache_warning(section: Cache | None) -> RunWarning | None:
    if section is None or section.hit_rate is None or section.hit_rate < NOTABLE_HIT_RATE:
        return None
    pct = section.hit_rate * 100
    where = section.source if isinstance(section.source, str) else "mixed sources"
    advice = (
        "the prompts were busted, so these hits are shared prefixes or later turns"
        if section.busted
        else "TTFT measures the cache as much as prefill; --cache-bust sends a unique prefix per request"
    )
    return RunWarning(
        code="cache.prefix_hits",
        message=f"prefix cache: {pct:.1f} % of prompt tokens were served from the server's cache ({where}); {advice}",
        figures={"hit_rate": section.hit_rate},
    )


def server_cache(engine_name: str, before: str, after: str) -> ServerCache | None:
    """The engine's prefix-cache figures over the run, from two /metrics texts; None when it has none.

    Engines count it differently (tokenrace.engines): vLLM counts queried and hit prompt tokens
    (a delta over the run); SGLang exposes a running hit-rate gauge (read at the end)."""
    found = engine(engine_name)
    if found is None or found.metrics is None:
        return None
    metrics = found.metrics
    for queries_name, hits_name in metrics.cache_counters:
        queries = counter_delta(before, after, queries_name)
        hits = counter_delta(before, after, hits_name)
        if queries is not None and hits is not None:
            rate = round(hits / queries, 6) if queries > 0 else None
            return ServerCache(
                source=f"{found.name} /metrics {hits_name} / {queries_name} (delta over the run)",
                queries=queries,
                hits=hits,
                hit_rate=rate,
            )
    if metrics.cache_gauge is not None:
        value = _gauge(after, metrics.cache_gauge)
        if value is not None:
            return ServerCache(
                source=f"{found.name} /metrics {metrics.cache_gauge} (at the end of the run)", hit_rate=round(value, 6)
            )
    return None


def _samples(text: str, name: str) -> list[tuple[str, float]]:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415 - import cost: the Prometheus parser only when /metrics was scraped

    out: list[tuple[str, float]] = []
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name == name or fam.name == name.removesuffix("_total"):
                out += [(s.name, float(s.value)) for s in fam.samples]
    except ValueError:  # a scrape that does not parse: no figure, never a crash
        return []
    return out


def counter_delta(before: str, after: str, name: str) -> float | None:
    """A Prometheus counter's increase between two scrapes (summed over label sets)."""

    def total(text: str) -> float | None:
        values = [v for n, v in _samples(text, name) if n in (name, f"{name}_total")]
        return sum(values) if values else None

    b, a = total(before), total(after)
    if a is None:
        return None
    return a - (b or 0.0)


def _gauge(text: str, name: str) -> float | None:
    values = [v for n, v in _samples(text, name) if n == name]
    return sum(values) / len(values) if values else None
