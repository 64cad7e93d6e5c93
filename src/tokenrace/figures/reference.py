"""A run's figures as the public references define them (`--profile`; docs/metrics.md, "Reference
profiles"). One function per figure, each from the records alone, following the reference's own
definition; `reference_section` gathers those of the run's profile.

The records' stamps are taken at the socket (docs/design.md), so the references' request start is
the send and their token times are the arrivals of content chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tokenrace.figures.summary import tokens_per_chunk
from tokenrace.load.profiles import profile
from tokenrace.model.records import RequestRecord
from tokenrace.model.reference import AaFigures, EndpointsFigures, LlmperfFigures, ReferenceFigures
from tokenrace.stats import spread, statistic

NS_PER_S = 1e9
AA_E2E_TOKENS = 100  # Artificial Analysis: end-to-end time for a 100-token answer


def _s(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None else (b - a) / NS_PER_S


def ttft_s(r: RequestRecord) -> float | None:
    """Send -> first content chunk, seconds (both references report TTFT in seconds)."""
    return _s(r.start_ns, r.first_token_ns)


# --- Artificial Analysis -------------------------------------------------------------------------


def aa_output_speed(r: RequestRecord) -> float | None:
    """Artificial Analysis' output speed: tokens after the first ÷ time after the first token, tok/s
    (the first content chunk to the last). None under 2 tokens or 2 chunks."""
    if r.output_tokens is None or r.output_tokens < 2 or len(r.chunk_ns) < 2:
        return None
    seconds = (r.chunk_ns[-1] - r.chunk_ns[0]) / NS_PER_S
    return (r.output_tokens - 1) / seconds if seconds > 0 else None


def aa_e2e_100_tokens(r: RequestRecord) -> float | None:
    """Artificial Analysis' end-to-end response time for 100 output tokens, seconds: the request's
    TTFT plus 100 tokens at its output speed."""
    first, speed = ttft_s(r), aa_output_speed(r)
    if first is None or speed is None:
        return None
    return first + AA_E2E_TOKENS / speed


def aa_figures(ok: Sequence[RequestRecord]) -> AaFigures:
    return AaFigures(
        output_speed_tok_s=spread(_values(ok, aa_output_speed)),
        ttft_s=spread(_values(ok, ttft_s)),
        e2e_100_tokens_s=spread(_values(ok, aa_e2e_100_tokens)),
    )


# --- LLMPerf ----------------------------------------------------------------------------------------


def llmperf_inter_token_latency(r: RequestRecord) -> float | None:
    """LLMPerf's inter-token latency, seconds: the sum of its gaps (send -> first content chunk, then
    chunk to chunk), that is send -> last content chunk, divided by the output tokens."""
    if not r.chunk_ns or not r.output_tokens:
        return None
    return (r.chunk_ns[-1] - r.start_ns) / NS_PER_S / r.output_tokens


def llmperf_e2e(r: RequestRecord) -> float | None:
    """LLMPerf's end-to-end latency, seconds: send -> end of the stream."""
    return _s(r.start_ns, r.end_ns)


def llmperf_request_output_throughput(r: RequestRecord) -> float | None:
    """LLMPerf's per-request output throughput: output tokens ÷ end-to-end latency, tokens/s."""
    e2e = llmperf_e2e(r)
    if r.output_tokens is None or e2e is None or e2e <= 0:
        return None
    return r.output_tokens / e2e


def _span_s(measured: Sequence[RequestRecord]) -> float | None:
    """The first send -> the last end of the measured requests, seconds."""
    ends = [r.end_ns for r in measured if r.end_ns is not None]
    if not measured or not ends:
        return None
    span = (max(ends) - min(r.start_ns for r in measured)) / NS_PER_S
    return span if span > 0 else None


def llmperf_figures(measured: Sequence[RequestRecord]) -> LlmperfFigures:
    ok = [r for r in measured if r.ok]
    span = _span_s(measured)
    counted = [r.output_tokens for r in ok if r.output_tokens is not None]
    return LlmperfFigures(
        ttft_s=spread(_values(ok, ttft_s)),
        inter_token_latency_s=spread(_values(ok, llmperf_inter_token_latency)),
        end_to_end_latency_s=spread(_values(ok, llmperf_e2e)),
        request_output_throughput_token_per_s=spread(_values(ok, llmperf_request_output_throughput)),
        number_input_tokens=spread([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
        number_output_tokens=spread(counted),
        overall_output_throughput=_r4(sum(counted) / span) if span and counted else None,
        num_completed_requests=len(ok),
        completed_requests_per_min=_r4(len(ok) / span * 60) if span else None,
        error_rate=_r4((len(measured) - len(ok)) / len(measured)) if measured else None,
    )


# --- MLPerf Endpoints -------------------------------------------------------------------------------


def endpoints_tpot_ms(r: RequestRecord) -> float | None:
    """MLPerf Endpoints' TPOT, ms: (completion − first chunk) ÷ the tokens after the first chunk."""
    if not r.chunk_ns or r.end_ns is None or r.output_tokens is None:
        return None
    first_chunk = tokens_per_chunk(r.chunk_tokens, r.output_tokens, len(r.chunk_ns))[0]
    after = r.output_tokens - first_chunk
    if after <= 0:
        return None
    return (r.end_ns - r.chunk_ns[0]) / 1e6 / after


def endpoints_system_tps(measured: Sequence[RequestRecord]) -> float | None:
    """MLPerf Endpoints' system tokens/s: output tokens of the completed requests ÷ the tracked window
    (the first send to the last completion)."""
    span = _span_s(measured)
    counted = [r.output_tokens for r in measured if r.ok and r.output_tokens is not None]
    return _r4(sum(counted) / span) if span and counted else None


def endpoints_figures(measured: Sequence[RequestRecord], concurrency: int | None) -> EndpointsFigures:
    ok = [r for r in measured if r.ok]
    tpot = _values(ok, endpoints_tpot_ms)
    ttft = [v * 1000 for v in _values(ok, ttft_s)]
    tpot_p90 = statistic_of(tpot, "p90")
    return EndpointsFigures(
        system_tps=endpoints_system_tps(measured),
        tps_per_user=_r4(1000 / tpot_p90) if tpot_p90 else None,
        ttft_p90_ms=statistic_of(ttft, "p90"),
        tpot_p90_ms=tpot_p90,
        concurrency=concurrency,
        offline=concurrency is not None and len(measured) > 1 and concurrency >= len(measured),
    )


# --- the run's profile ------------------------------------------------------------------------------


def reference_section(
    name: str | None, records: Sequence[RequestRecord], concurrency: int | None
) -> ReferenceFigures | None:
    """The figures the profile `name` asks for (None without a profile). `concurrency`: the run's
    fixed concurrency (None for an open loop)."""
    if name is None:
        return None
    p = profile(name)
    measured = [r for r in records if r.phase == "measure" and r.error_kind != "cancelled"]
    out = ReferenceFigures(profile=p.name, reference=p.reference, source=p.source)
    if p.reference == "aa":
        out.aa = aa_figures([r for r in measured if r.ok])
    elif p.reference == "llmperf":
        out.llmperf = llmperf_figures(measured)
    else:
        out.endpoints = endpoints_figures(measured, concurrency)
    return out


def _values(rs: Sequence[RequestRecord], figure: Callable[[RequestRecord], float | None]) -> list[float]:
    return [v for r in rs if (v := figure(r)) is not None]


def statistic_of(values: Sequence[float], stat: str) -> float | None:
    """A percentile of `values` (numpy linear interpolation, as `stats.describe`), None when empty."""
    return _r4(statistic(np.asarray(values, dtype=float), stat)) if values else None


def _r4(v: float | None) -> float | None:
    return None if v is None else round(v, 4)
