"""The engine's clock from recorded responses and /metrics texts (vLLM, SGLang, llama.cpp)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokenrace.figures.engine_clock import from_metrics_delta, llamacpp_times, server_vs_client
from tokenrace.model.records import RequestRecord, ServerTiming
from tokenrace.monitor.server import histogram_mean_delta

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"

# A llama.cpp server's `timings` object, as recorded from llama-server (b5xxx+) on a chat stream.
LLAMACPP_TIMINGS: ServerTiming = {
    "cache_n": 0,
    "prompt_n": 211,
    "prompt_ms": 142.35,
    "prompt_per_token_ms": 0.6746,
    "prompt_per_second": 1482.2,
    "predicted_n": 48,
    "predicted_ms": 470.0,
    "predicted_per_token_ms": 9.79,
    "predicted_per_second": 102.1,
}


def _bump(text: str, metric: str, add_sum: float, add_count: float) -> str:
    def repl(m: re.Match[str]) -> str:
        add = add_sum if m.group(1) == "sum" else add_count
        return f"{metric}_{m.group(1)}{m.group(2)} {float(m.group(3)) + add}"

    return re.sub(rf"^{re.escape(metric)}_(sum|count)(\{{[^}}]*\}}) ([0-9.e+]+)$", repl, text, flags=re.M)


def test_llamacpp_timings_definitions() -> None:
    ttft, tpot = llamacpp_times(LLAMACPP_TIMINGS)
    assert ttft == 142.35 and tpot == pytest.approx(470.0 / 47)
    assert llamacpp_times({"predicted_n": 1, "predicted_ms": 5.0, "prompt_ms": 1.0}) == (1.0, None)


def test_server_vs_client_from_responses() -> None:
    r = RequestRecord(seq=0, start_ns=0)
    r.first_token_ns = int(150e6)
    r.chunk_ns = [int(150e6), int(150e6 + 470e6)]
    r.output_tokens = 48
    r.server_timing = LLAMACPP_TIMINGS
    r.settle(0)
    svc = server_vs_client([r])
    assert svc is not None
    assert svc.ttft_ms.client_minus_server_p50 == pytest.approx(150 - 142.35, abs=1e-3)
    assert svc.tpot_ms.ratio_p50 == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("engine,prefix", [("vllm", "vllm"), ("sglang", "sglang")])
def test_metrics_delta_over_a_run(engine: str, prefix: str) -> None:
    before = (FIX / f"{engine}.txt").read_text()
    # 100 requests during the run: TTFT sum +12.5 s (mean 125 ms), TPOT sum +1.2 s (mean 12 ms).
    after = _bump(
        _bump(before, f"{prefix}:time_to_first_token_seconds", 12.5, 100),
        f"{prefix}:time_per_output_token_seconds",
        1.2,
        100,
    )
    assert histogram_mean_delta(before, after, f"{prefix}:time_to_first_token_seconds") == pytest.approx(0.125)
    svc = from_metrics_delta(engine, before, after, client_ttft_mean_ms=131.25, client_tpot_mean_ms=12.0)
    assert svc is not None
    assert svc.ttft_ms.server_mean == pytest.approx(125.0) and svc.ttft_ms.ratio_mean == pytest.approx(1.05)
    assert svc.tpot_ms.ratio_mean == pytest.approx(1.0)


def test_no_new_requests_means_no_comparison() -> None:
    text = (FIX / "vllm.txt").read_text()
    assert from_metrics_delta("vllm", text, text, 1.0, 1.0) is None
    assert from_metrics_delta("llama.cpp", text, text, 1.0, 1.0) is None
