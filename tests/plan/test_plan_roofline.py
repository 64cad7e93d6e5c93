"""Speed-of-light formulas against hand-worked examples."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tokenrace.plan import load_hardware, load_model, plan
from tokenrace.plan.catalog import Hardware
from tokenrace.plan.modelspec import MoE, ParamCounts
from tokenrace.plan.precision import get_precision
from tokenrace.plan.roofline import causal_pairs, decode_step, prefill


def test_the_guides_31b_at_2_tb_s_decodes_at_about_32_tokens_per_s() -> None:
    """62 GB of FP16 weights read per token at 2 TB/s: 2e12 / 62e9 = 32.3 tok/s."""
    dense31 = replace(load_model("gemma-4-31b"), params=ParamCounts(0, 0, 31_000_000_000, 0))
    device = Hardware("2 TB/s", "gpu", 200 * 2**30, 2e12, {}, "a round figure")
    step = decode_step(dense31, device, 1, get_precision("fp16"), 2, context=1, batch=1)
    assert step.weight_bytes == 62e9
    assert 1 / step.seconds == pytest.approx(2e12 / 62e9, rel=1e-4)
    assert round(1 / step.seconds) == 32


def test_gemma_4_31b_on_a_2_tb_s_h100_pcie() -> None:
    r = plan("gemma-4-31b", "H100-PCIe", precision="bf16", context=1024)
    assert r.devices == 1 and r.fits
    assert 30 <= r.decode_tokens_per_s_bound <= 33


def test_decode_reads_weights_once_and_kv_per_sequence() -> None:
    llama, h100 = load_model("llama-3.1-8b"), load_hardware("H100-SXM")
    bf16 = get_precision("bf16")
    one = decode_step(llama, h100, 1, bf16, 2, context=8192, batch=1)
    sixteen = decode_step(llama, h100, 1, bf16, 2, context=8192, batch=16)
    weights = (llama.params.dense + llama.params.lm_head) * 2  # the input embedding is read one row per token
    assert one.weight_bytes == sixteen.weight_bytes == weights
    assert one.kv_bytes == 131_072 * 8192
    assert sixteen.kv_bytes == 16 * 131_072 * 8192
    assert sixteen.memory_s == pytest.approx((weights + 16 * 131_072 * 8192) / 3.35e12)


def test_tied_embeddings_are_read_as_the_lm_head() -> None:
    smol = load_model("smollm2-135m")
    step = decode_step(smol, load_hardware("H100-SXM"), 1, get_precision("bf16"), 2, context=1, batch=1)
    assert step.weight_bytes == (smol.params.dense + smol.params.embedding) * 2


def test_large_batches_become_compute_bound() -> None:
    llama, h100 = load_model("llama-3.1-8b"), load_hardware("H100-SXM")
    assert decode_step(llama, h100, 1, get_precision("bf16"), 2, 128, 1).bound_by == "memory"
    assert decode_step(llama, h100, 1, get_precision("bf16"), 2, 128, 1024).bound_by == "compute"


def test_tensor_parallel_splits_bytes_and_flops() -> None:
    llama, h100 = load_model("llama-3.1-70b"), load_hardware("H100-SXM")
    one = decode_step(llama, h100, 1, get_precision("bf16"), 2, 4096, 8)
    four = decode_step(llama, h100, 4, get_precision("bf16"), 2, 4096, 8)
    assert four.weight_bytes == pytest.approx(one.weight_bytes / 4)
    assert four.kv_bytes == pytest.approx(one.kv_bytes / 4)
    assert four.flops == pytest.approx(one.flops / 4)


def test_causal_pairs() -> None:
    assert causal_pairs(4, None) == 1 + 2 + 3 + 4
    assert causal_pairs(10, 4) == 1 + 2 + 3 + 4 + 6 * 4  # each token sees at most the window
    assert causal_pairs(3, 8) == 6


def test_prefill_flops_hand_worked() -> None:
    """2 · params · N for the layers, the LM head once, and 4 · heads · head_dim per attended pair."""
    smol = load_model("smollm2-135m")
    n = 512
    step = prefill(smol, load_hardware("H100-SXM"), 1, get_precision("bf16"), 2, n)
    layers = 2 * smol.params.dense * n
    head = 2 * smol.params.embedding
    attention = 30 * 4 * 9 * 64 * n * (n + 1) // 2
    assert step.flops == layers + head + attention
    assert step.compute_s == pytest.approx(step.flops / 989.5e12)


def test_ttft_bound_is_the_slower_of_compute_and_memory() -> None:
    r = plan("llama-3.1-8b", "H100-SXM", context=8192)
    assert r.prefill.bound_by == "compute"
    assert r.ttft_ms_bound == pytest.approx(r.prefill.flops / 989.5e12 * 1000)
    short = plan("llama-3.1-8b", "H100-SXM", context=8192, input_tokens=16)
    assert short.prefill.bound_by == "memory"  # a short prompt still has to read every weight once


def test_moe_reads_only_the_routed_experts() -> None:
    mixtral, h100 = load_model("mixtral-8x7b"), load_hardware("H100-SXM")
    bf16 = get_precision("bf16")
    step = decode_step(mixtral, h100, 2, bf16, 2, context=1, batch=1)
    p = mixtral.params
    assert step.expert_fraction == 0.25
    assert step.weight_bytes == pytest.approx((p.dense + p.lm_head + p.experts * 2 / 8) * 2 / 2)
    batch = decode_step(mixtral, h100, 2, bf16, 2, context=1, batch=16)
    assert batch.expert_fraction == pytest.approx(1 - 0.75**16)
    assert MoE(8, 2).fraction_read(2) == pytest.approx(1 - 0.75**2)


def test_moe_decodes_faster_than_a_dense_model_of_the_same_size() -> None:
    mixtral = plan("mixtral-8x7b", "H100-SXM", devices=2, context=1)
    dense = replace(mixtral.model, moe=None)
    as_dense = plan(dense, "H100-SXM", devices=2, context=1)
    ratio = mixtral.decode_tokens_per_s_bound / as_dense.decode_tokens_per_s_bound
    assert 3.0 < ratio < 3.7  # ~46.7B / ~12.9B parameters read


def test_groq_chips_hold_the_weights_and_a_token_reads_one_layer_group_at_a_time() -> None:
    """Groq's LPU: 230 MB of SRAM and 80 TB/s per chip. Llama-2-70B: 68,976,648,192 parameters in 80
    layers. At 1 byte each the weights alone fill 300 chips' SRAM to the brim, at 2 bytes 600."""
    weights = 68_976_648_192
    r = plan("llama-2-70b", "groq", precision="int8", context=2048)
    assert r.weights_bytes == weights
    assert math.ceil(weights / 230e6) == 300 < r.min_devices == r.devices  # plus the KV cache and headroom
    # The token visits the 80 layers in turn: one layer's chips (the devices / 80, rounded up) read its
    # weights, and its share of the KV cache (~1 % here), at 80 TB/s each.
    chips_per_layer = math.ceil(r.devices / 80)
    assert r.decode.memory_s == pytest.approx(weights / chips_per_layer / 80e12, rel=0.02)
    # A bound is never below a measurement: Groq served Llama 2 70B at 300 tokens/s (plan/published.json).
    assert r.decode_tokens_per_s_bound > 300
    # Llama-2-70B was reportedly served on ~576 chips: INT8 weights fit on that many, FP16 would not.
    assert r.min_devices <= 576 < 600 < plan("llama-2-70b", "groq", precision="fp16", context=2048).min_devices
