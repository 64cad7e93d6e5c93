"""Records -> summary. Every figure is defined once, in docs/metrics.md.

Latency distributions use successful requests of the measured phase. Cold and warm-up requests are
kept in records.jsonl but never mixed into these statistics; the cold request is reported alone.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

from tokenrace.errors import InvalidInput
from tokenrace.figures.cache import source_of
from tokenrace.load.windows import Windows
from tokenrace.model.metrics import METRICS
from tokenrace.model.records import NS_PER_MS, RequestRecord
from tokenrace.model.stats import Stats
from tokenrace.model.summary import (
    Cold,
    Goodput,
    Metrics,
    Probes,
    RequestCounts,
    Stopped,
    Summary,
    Throughput,
    TokenCountSource,
    TurnStats,
)
from tokenrace.stats import describe, describe_mean

SLO_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms")


def _ms(ns: int) -> float:
    return ns / NS_PER_MS


def _itl(records: Sequence[RequestRecord]) -> tuple[list[float], list[float], list[int], list[int]]:
    """(itl_chunk values, itl_token values, itl_token weights, tokens per chunk)."""
    chunk_gaps: list[float] = []
    token_gaps: list[float] = []
    weights: list[int] = []
    per_chunk: list[int] = []
    for r in records:
        gaps = [_ms(b - a) for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]
        chunk_gaps.extend(gaps)
        if r.chunk_tokens is not None:
            per_chunk.extend(r.chunk_tokens)
            for gap, k in zip(gaps, r.chunk_tokens[1:], strict=False):
                if k > 0:
                    token_gaps.append(gap / k)
                    weights.append(k)
    return chunk_gaps, token_gaps, weights, per_chunk


def _meets(r: RequestRecord, slo: dict[str, float]) -> bool:
    for name, limit in slo.items():
        if name == "itl_ms":
            gaps = [_ms(b - a) for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]
            if gaps and max(gaps) > limit:
                return False
            continue
        value = getattr(r, name)
        if value is None or value > limit:
            return False
    return True


def _tokens_per_chunk_stats(ok: Sequence[RequestRecord], per_chunk: list[int]) -> Stats:
    """Per chunk when every counted request has per-chunk counts; else the exact mean alone.

    A request's output token count (from usage or a tokenizer, not from its chunks) divided over its
    content chunks gives the mean exactly without knowing how the tokens were spread, so the mean is
    never null when usage exists; the per-chunk spread needs per-chunk counts.
    """
    counted = [r for r in ok if r.chunk_ns and r.output_tokens is not None and r.output_tokens_source != "chunks"]
    if not counted or all(r.chunk_tokens is not None for r in counted):
        return describe(per_chunk)
    tokens = sum(r.output_tokens or 0 for r in counted)
    return describe_mean(tokens, sum(len(r.chunk_ns) for r in counted))


def tokens_per_chunk(chunk_tokens: list[int] | None, output_tokens: float, chunks: int) -> list[float]:
    """Tokens each chunk carried: counted per chunk when a tokenizer gave them, else the output spread evenly."""
    return [float(k) for k in chunk_tokens] if chunk_tokens else [output_tokens / chunks] * chunks


def _steady_tokens_per_s(records: Sequence[RequestRecord], w: Windows) -> float | None:
    """Output tokens that arrived inside the steady window, per second of it."""
    if w.steady_start_ns is None or w.steady_end_ns is None or w.steady_end_ns <= w.steady_start_ns:
        return None
    total = 0.0
    for r in records:
        if r.output_tokens is None or not r.chunk_ns:
            continue
        per = tokens_per_chunk(r.chunk_tokens, r.output_tokens, len(r.chunk_ns))
        total += sum(k for t, k in zip(r.chunk_ns, per, strict=False) if w.steady_start_ns <= t <= w.steady_end_ns)
    return round(total / ((w.steady_end_ns - w.steady_start_ns) / 1e9), 4)


def _values(records: Sequence[RequestRecord], figure: Callable[[RequestRecord], float | None]) -> list[float]:
    """One settled figure of each record, where it is defined."""
    return [v for r in records if (v := figure(r)) is not None]


def summarize(records: Sequence[RequestRecord], windows: Windows, slo: dict[str, float] | None = None) -> Summary:
    """The figures of the records alone, settled (`RequestRecord.settle`, as the run store leaves
    them); `runs.summary.build_summary` adds what the run observed."""
    measured = [r for r in records if r.phase == "measure" and r.error_kind != "cancelled"]
    cancelled = sum(1 for r in records if r.phase == "measure" and r.error_kind == "cancelled")
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    chunk_gaps, token_gaps, token_w, per_chunk = _itl(ok)
    pooled = {
        "itl_chunk_ms": describe(chunk_gaps),
        "itl_token_ms": describe(token_gaps, token_w),
        "tokens_per_chunk": _tokens_per_chunk_stats(ok, per_chunk),
    }
    over = {"succeeded": ok, "measured": measured}
    metrics = Metrics(
        **{m.name: describe(_values(over[m.over], m.value)) if m.value else pooled[m.name] for m in METRICS}
    )
    window_s = _window_s(measured)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    counted_output = any(r.output_tokens is not None for r in ok)
    return Summary(
        requests=RequestCounts(total=len(measured), succeeded=len(ok), failed=len(failed), cancelled=cancelled),
        error_rate=round(len(failed) / len(measured), 6) if measured else None,
        errors_by_kind=dict(Counter(r.error_kind for r in failed if r.error_kind is not None)),
        metrics=metrics,
        throughput=Throughput(
            window_s=round(window_s, 6) if window_s else None,
            # Unknown (not 0) when no request counted output: embeddings and rerank generate none.
            output_tokens_per_s=round(out_tokens / window_s, 4) if window_s and counted_output else None,
            requests_per_s=round(len(ok) / window_s, 4) if window_s else None,
            steady_output_tokens_per_s=_steady_tokens_per_s(ok, windows),
            steady_window_s=_steady_window_s(windows),
        ),
        offered_rate=windows.offered_rate,
        achieved_rate=_achieved_rate(measured),
        max_in_flight=windows.max_in_flight,
        cold=_cold(records),
        token_count_source=TokenCountSource(
            output_tokens=source_of(ok, "output_tokens_source"),
            prompt_tokens=source_of(ok, "prompt_tokens_source"),
            cached_tokens=source_of(ok, "cached_tokens_source"),
            approximate=any(r.output_tokens_source == "chunks" for r in ok),
        ),
        goodput=_goodput(ok, len(measured), window_s, slo) if slo else None,
    )


def _goodput(ok: Sequence[RequestRecord], measured: int, window_s: float | None, slo: dict[str, float]) -> Goodput:
    good = sum(1 for r in ok if _meets(r, slo))
    return Goodput(
        slo=slo,
        requests=good,
        fraction=round(good / measured, 6) if measured else None,
        requests_per_s=round(good / window_s, 4) if window_s else None,
    )


def by_turn(ok: Sequence[RequestRecord]) -> list[TurnStats]:
    """Per turn number of multi-turn sessions: first turns and later turns seen apart."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in ok:
        if r.turn is not None:
            turns.setdefault(r.turn, []).append(r)
    out = []
    for turn in sorted(turns):
        rs = turns[turn]
        both = [r for r in rs if r.cached_tokens is not None and r.prompt_tokens]
        prompt = sum(r.prompt_tokens or 0 for r in both)
        out.append(
            TurnStats(
                turn=turn,
                requests=len(rs),
                ttft_ms=describe(_values(rs, lambda r: r.ttft_ms)),
                e2e_ms=describe(_values(rs, lambda r: r.e2e_ms)),
                prompt_tokens=describe([r.prompt_tokens for r in rs if r.prompt_tokens is not None]),
                cache_hit_rate=round(sum(r.cached_tokens or 0 for r in both) / prompt, 6) if prompt else None,
            )
        )
    return out


def _window_s(measured: Sequence[RequestRecord]) -> float | None:
    ends = [r.end_ns for r in measured if r.end_ns is not None]
    if not measured or not ends:
        return None
    span = (max(ends) - min(r.start_ns for r in measured)) / 1e9
    return span if span > 0 else None


def _steady_window_s(w: Windows) -> float | None:
    if w.steady_start_ns is None or w.steady_end_ns is None or w.steady_end_ns <= w.steady_start_ns:
        return None
    return round((w.steady_end_ns - w.steady_start_ns) / 1e9, 6)


def _achieved_rate(measured: Sequence[RequestRecord]) -> float | None:
    starts = sorted(r.start_ns for r in measured)
    if len(starts) < 2 or starts[-1] == starts[0]:
        return None
    return round((len(starts) - 1) / ((starts[-1] - starts[0]) / 1e9), 4)


def probes_section(records: Sequence[RequestRecord], rate: float | None) -> Probes | None:
    """The probes sent beside the load (phase "probe"): what a new user waits for the first token."""
    probes = [r for r in records if r.phase == "probe"]
    if rate is None and not probes:
        return None
    ok = [r for r in probes if r.ok]
    return Probes(
        rate=rate,
        requests=len(probes),
        succeeded=len(ok),
        failed=sum(1 for r in probes if not r.ok and r.error_kind != "cancelled"),
        ttft_ms=describe(_values(ok, lambda r: r.ttft_ms)),
        e2e_ms=describe(_values(ok, lambda r: r.e2e_ms)),
    )


def stopped_section(w: Windows) -> Stopped | None:
    """Why an open loop stopped before its schedule ended (load/saturation.py), with the figures."""
    if w.stopped is None:
        return None
    return Stopped(reason="over-saturated", message=w.stopped.message(), **dataclasses.asdict(w.stopped))


def _cold(records: Sequence[RequestRecord]) -> Cold | None:
    cold = next((r for r in records if r.phase == "cold"), None)
    if cold is None:
        return None
    return Cold(seq=cold.seq, ttft_ms=cold.ttft_ms, e2e_ms=cold.e2e_ms, error_kind=cold.error_kind)


def parse_slo(text: str | None) -> dict[str, float] | None:
    """`ttft=500ms,tpot=50ms,e2e=10s` -> {"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": 10000}."""
    if not text:
        return None
    out: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.strip().partition("=")
        key = f"{name.strip().lower()}_ms"
        if key not in SLO_METRICS or not value:
            raise InvalidInput("slo", f"expected NAME=VALUE with NAME in ttft, tpot, itl, e2e; got {part!r}")
        out[key] = _duration_ms(value.strip(), part)
    return out


def _duration_ms(value: str, part: str) -> float:
    for suffix, scale in (("ms", 1.0), ("us", 1e-3), ("s", 1000.0)):
        if value.endswith(suffix):
            try:
                return float(value[: -len(suffix)]) * scale
            except ValueError:
                break
    try:
        return float(value)  # bare numbers are milliseconds
    except ValueError:
        raise InvalidInput("slo", f"cannot read the duration in {part!r} (use 500ms or 2s)") from None
