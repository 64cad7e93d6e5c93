"""The engine's own clock beside the client's: `server_vs_client` in the summary.

llama.cpp's server returns `timings` with every response: `prompt_ms` (prompt processing, which
ends when the first token is sampled) and `predicted_ms` over `predicted_n` generated tokens (from
the first generated token to the last). Its TTFT is prompt_ms; its TPOT is
predicted_ms / (predicted_n - 1), the same gaps-over-tokens definition the client uses.

vLLM and SGLang report the same quantities as Prometheus histograms; `from_metrics_delta` reads
the mean over a run from two scrapes of /metrics (before and after).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenrace.engines import WITH_HISTOGRAMS
from tokenrace.model.records import RequestRecord, ServerTiming
from tokenrace.model.summary import ClockPair, EngineClock
from tokenrace.monitor.server import first_histogram_mean_delta


def llamacpp_times(timing: ServerTiming | None) -> tuple[float | None, float | None]:
    """(server TTFT ms, server TPOT ms) from a llama.cpp `timings` object."""
    if not timing:
        return None, None
    ttft = timing.get("prompt_ms")
    n = timing.get("predicted_n")
    ms = timing.get("predicted_ms")
    tpot = ms / (n - 1) if isinstance(n, int) and n >= 2 and isinstance(ms, (int, float)) else None
    return (float(ttft) if isinstance(ttft, (int, float)) else None), tpot


def server_vs_client(records: Sequence[RequestRecord]) -> EngineClock | None:
    ttft_pairs: list[tuple[float, float]] = []
    tpot_pairs: list[tuple[float, float]] = []
    for r in records:
        s_ttft, s_tpot = llamacpp_times(r.server_timing)
        if s_ttft is not None and r.ttft_ms is not None:
            ttft_pairs.append((r.ttft_ms, s_ttft))
        if s_tpot is not None and r.tpot_ms is not None:
            tpot_pairs.append((r.tpot_ms, s_tpot))
    if not ttft_pairs and not tpot_pairs:
        return None
    return EngineClock(
        source="llama.cpp timings (per response)",
        requests=max(len(ttft_pairs), len(tpot_pairs)),
        ttft_ms=_compare(ttft_pairs),
        tpot_ms=_compare(tpot_pairs),
    )


def _compare(pairs: list[tuple[float, float]]) -> ClockPair:
    if not pairs:
        return ClockPair()
    c = np.array([p[0] for p in pairs])
    s = np.array([p[1] for p in pairs])
    ratio = c[s > 0] / s[s > 0]
    return ClockPair(
        client_p50=round(float(np.median(c)), 4),
        server_p50=round(float(np.median(s)), 4),
        client_minus_server_p50=round(float(np.median(c - s)), 4),
        ratio_p50=round(float(np.median(ratio)), 4) if ratio.size else None,
    )


ENGINE_HISTOGRAMS = WITH_HISTOGRAMS  # engine -> its TTFT/TPOT histograms (tokenrace.engines)


def from_metrics_delta(
    engine: str, before: str, after: str, client_ttft_mean_ms: float | None, client_tpot_mean_ms: float | None
) -> EngineClock | None:
    names = ENGINE_HISTOGRAMS.get(engine)
    if names is None:
        return None
    s_ttft = first_histogram_mean_delta(before, after, names["ttft_s"])
    s_tpot = first_histogram_mean_delta(before, after, names["tpot_s"])
    if s_ttft is None and s_tpot is None:
        return None

    def pair(client: float | None, server_s: float | None) -> ClockPair:
        server = None if server_s is None else round(server_s * 1000, 4)
        ratio = None if client is None or not server else round(client / server, 4)
        return ClockPair(client_mean=client, server_mean=server, ratio_mean=ratio)

    return EngineClock(
        source=f"{engine} /metrics histograms (delta over the run)",
        ttft_ms=pair(client_ttft_mean_ms, s_ttft),
        tpot_ms=pair(client_tpot_mean_ms, s_tpot),
    )
