"""Shadow mode: the same request to a second backend, answer discarded, latency and agreement kept.

The copy leaves at the same moment as the real request (both see the same load), runs as a
background task with its own in-flight cap, and never touches the client's response. When both
answers are in, their agreement is scored with the quality comparison's functions
(tokenrace.text_agreement): exact match, and the token-level similarity (1.0 = the same tokens in
the same order, 0.0 = nothing in common) over the first SCORE_TOKENS tokens of each answer.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from tokenrace.gateway import clock
from tokenrace.gateway.runtime import ShadowResult
from tokenrace.gateway.stream import StreamTap, whole_response
from tokenrace.gateway.upstream import UpstreamError, UpstreamResponse
from tokenrace.gateway.views import ShadowView
from tokenrace.model.stats import Percentiles
from tokenrace.stats import describe
from tokenrace.text_agreement import agreement, exact_match

if TYPE_CHECKING:
    from tokenrace.gateway.context import ProxyContext
    from tokenrace.gateway.context import ShadowCall as Call
    from tokenrace.gateway.runtime import Route, Shadow

perf_ns = time.perf_counter_ns
PRIMARY_WAIT_S = 600.0
# The similarity's alignment runs on the gateway's event loop: 512 tokens a side cost under 1 ms,
# a whole 8000-token answer 50-100 ms (benchmarks/agreement_cost.py), which would stall every
# request the gateway is proxying.
SCORE_TOKENS = 512


async def run_shadow(
    gw: ProxyContext, route: Route, shadow: Shadow, call: Call, primary: asyncio.Future[str | None]
) -> None:
    backend = shadow.backend
    m = gw.metrics
    if backend.unavailable(clock.monotonic()) is not None:
        m.shadow_requests.labels(route.name, backend.name, "skipped_unavailable").inc()
        return
    shadow.in_flight += 1
    backend.in_flight += 1
    try:
        outcome, ttft_s, duration_s, text = await _send(call, shadow)
    finally:
        shadow.in_flight -= 1
        backend.in_flight -= 1
    backend.breaker.record(outcome == "ok", clock.monotonic(), outcome)
    m.shadow_requests.labels(route.name, backend.name, outcome).inc()
    if ttft_s is not None:
        m.shadow_ttft.labels(route.name, backend.name).observe(ttft_s)
    if duration_s is not None:
        m.shadow_duration.labels(route.name, backend.name).observe(duration_s)
    try:
        primary_text = await asyncio.wait_for(asyncio.shield(primary), PRIMARY_WAIT_S)
    except TimeoutError:
        primary_text = None
    score = same = None
    if primary_text is not None and text is not None:
        score, same = agreement(primary_text, text, SCORE_TOKENS), exact_match(primary_text, text)
        m.shadow_agreement.labels(route.name, backend.name).observe(score)
    shadow.recent.append(ShadowResult(clock.wall(), outcome, ttft_s, duration_s, score, same))


async def _send(call: Call, shadow: Shadow) -> tuple[str, float | None, float | None, str | None]:
    """(outcome, ttft_s, duration_s, text) of the shadow copy."""
    backend = shadow.backend
    pool = backend.pool
    assert pool is not None
    extra = b"x-request-id: " + call.request_id.encode("latin-1", "replace") + b"-shadow\r\n" + call.forwarded(backend)
    t0 = perf_ns()
    resp: UpstreamResponse | None = None
    try:
        async with asyncio.timeout(backend.config.timeouts.total_s):
            resp = await pool.request(backend.heads[call.endpoint], extra, call.upstream_body(backend))
            if resp.status >= 400:
                await resp.read_all(64 * 1024)
                return f"http_{resp.status}", None, None, None
            if call.stream:
                return await _read_stream(call, resp, t0)
            body = await resp.read_all()
            return "ok", None, (perf_ns() - t0) / 1e9, _text(body, call)
    except TimeoutError:
        return "timeout", None, None, None
    except UpstreamError as exc:
        return exc.kind, None, None, None
    finally:
        if resp is not None:
            resp.close()


async def _read_stream(
    call: Call, resp: UpstreamResponse, t0: int
) -> tuple[str, float | None, float | None, str | None]:
    tap = StreamTap(call.endpoint, keep_text=True)
    while chunk := await resp.read():
        tap.feed(chunk, perf_ns())
    tap.close()
    ttft = (tap.first_token_ns - t0) / 1e9 if tap.first_token_ns is not None else None
    outcome = "ok" if tap.done else "truncated"
    return outcome, ttft, (perf_ns() - t0) / 1e9, tap.text()


def _text(body: bytes, call: Call) -> str | None:
    return whole_response(body, call.endpoint, want_text=True)[1]


def summary(shadow: Shadow) -> ShadowView:
    """Recent shadow results for /admin/state: counts, p50/p95 latency, mean agreement."""
    recent = list(shadow.recent)
    ttft = describe([r.ttft_s * 1000 for r in recent if r.ttft_s is not None])
    dur = describe([r.duration_s * 1000 for r in recent if r.duration_s is not None])
    agree = [r.agreement for r in recent if r.agreement is not None]
    same = [r.exact_match for r in recent if r.exact_match is not None]
    return ShadowView(
        backend=shadow.backend.name,
        share=shadow.config.share,
        in_flight=shadow.in_flight,
        recent=len(recent),
        ok=sum(1 for r in recent if r.outcome == "ok"),
        ttft_ms=Percentiles(p50=ttft.p50, p95=ttft.p95),
        duration_ms=Percentiles(p50=dur.p50, p95=dur.p95),
        agreement_mean=round(sum(agree) / len(agree), 4) if agree else None,
        exact_match_rate=round(sum(same) / len(same), 4) if same else None,
    )
