"""Published measurements must sit under the speed of light, at a credible fraction of it.

If one of these fails, fix the model or the catalog row, never the test.
Credible: llama.cpp single-stream decode reaches roughly 45–85 % of the bandwidth bound; a batched,
tensor-parallel throughput run that includes prefill and scheduling reaches less.
"""

from __future__ import annotations

import pytest

from tokenrace.plan import plan
from tokenrace.plan.published import PublishedPoint, check_point, published_points

# llama.cpp's single-stream points live in the published table (published.json), with their sources.
LLAMA_CPP = [p for p in published_points() if p.id.startswith("llama-cpp-")]


@pytest.mark.parametrize("point", LLAMA_CPP, ids=[p.id for p in LLAMA_CPP])
def test_llama_cpp_single_stream_decode(point: PublishedPoint) -> None:
    # tg128 from an empty context: the KV cache holds 64 tokens on average.
    assert (point.context, point.input_tokens, point.devices) == (64, 1, 1)
    check = check_point(point)
    assert check.bound >= point.tok_s, f"{point.id}: bound {check.bound:.1f} < measured {point.tok_s} ({point.source})"
    assert 40 <= check.share_pct <= 90, f"{point.id}: {check.share_pct:.0f} % of the bound"


def test_the_table_keeps_every_llama_cpp_point() -> None:
    assert len(LLAMA_CPP) == 6
    assert {p.hardware for p in LLAMA_CPP} == {"RTX-3090", "RTX-4090", "RTX-3090-Ti", "i9-13900K-DDR5-6400"}


def test_trt_llm_h100_fp8_llama_70b_tp4_batch_64() -> None:
    """TRT-LLM 0.5.0 performance table: 3317 output tok/s in total, 128 in / 128 out, batch 64."""
    measured = 3317
    # Decode alone, KV at the 128-token prompt (the least KV, so the highest bound).
    r = plan(
        "llama-2-70b",
        "H100-SXM",
        devices=4,
        precision="fp8",
        kv_dtype="fp8",
        context=128,
        concurrency=64,
        input_tokens=128,
    )
    assert r.fits
    assert r.aggregate_tokens_per_s_bound >= measured
    assert 0.20 <= measured / r.aggregate_tokens_per_s_bound <= 0.90
    # The whole cycle: 64 prompts prefilled (compute at best), then 128 steps as the KV grows.
    prefill_s = 64 * r.prefill.flops / r.prefill.compute
    steps = [plan(r.model, r.hardware, devices=4, precision="fp8", kv_dtype="fp8", context=128 + i,
                  concurrency=64, input_tokens=128).decode.seconds for i in range(0, 128, 16)]  # fmt: skip
    cycle_bound = 64 * 128 / (prefill_s + 128 * sum(steps) / len(steps))
    assert cycle_bound >= measured
    assert 0.25 <= measured / cycle_bound <= 0.90
