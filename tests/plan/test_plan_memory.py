"""Weights, KV cache and fitting, against hand-worked figures."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrace.plan import load_hardware, load_model, plan
from tokenrace.plan.memory import kv_bytes_per_sequence, kv_bytes_per_token, valid_tp_sizes
from tokenrace.plan.modelspec import MoE, ParamCounts
from tokenrace.plan.precision import get_precision

GIB = 2**30


def test_the_guides_31b_weights() -> None:
    """31B parameters: 2 / 1 / 0.5 bytes each -> 62 / 31 / 15.5 (~16) GB."""
    dense31 = replace(load_model("gemma-4-31b"), params=ParamCounts(0, 0, 31_000_000_000, 0))
    assert dense31.weight_bytes(get_precision("fp16")).total == 62e9
    assert dense31.weight_bytes(get_precision("int8")).total == 31e9
    assert dense31.weight_bytes(get_precision("int4")).total == 15.5e9


def test_gemma_4_31b_weights_are_the_guides_figures() -> None:
    gemma = load_model("gemma-4-31b")
    for prec, guide in (("bf16", 62e9), ("int8", 31e9), ("int4", 16e9)):
        assert gemma.weight_bytes(get_precision(prec)).total == pytest.approx(guide, rel=0.05)


def test_awq_costs_scales_and_16_bit_embeddings() -> None:
    """Llama 3.1 8B in AWQ, worked by hand from its config.json (hidden 4096, intermediate 14336, 32
    layers, 8 KV heads of 128, vocabulary 128,256, head not tied): each layer's linear weights at 4
    bits plus a 16-bit scale and a 4-bit zero per group of 128; the norms, the embedding and the head
    at 16 bits. 5.73 GB, against 16.06 GB in BF16."""
    linear = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)  # q, o; k, v; gate, up, down
    norms = 32 * 2 * 4096 + 4096
    vocab = 128_256 * 4096
    assert linear + norms + 2 * vocab == 8_030_261_248  # the model's published parameter count
    expected = linear * (4 + (16 + 4) / 128) / 8 + (norms + 2 * vocab) * 2
    assert expected == pytest.approx(5.728e9, rel=1e-3)
    # The planner counts the norms with the quantized weights: 0.4 MB of 5.7 GB.
    assert load_model("llama-3.1-8b").weight_bytes(get_precision("awq")).total == pytest.approx(expected, rel=1e-4)


def test_kv_per_token_gqa() -> None:
    # 2 (K, V) × layers × kv_heads × head_dim × 2 bytes
    assert kv_bytes_per_token(load_model("llama-3.1-8b"), 2) == 2 * 32 * 8 * 128 * 2 == 131_072
    assert kv_bytes_per_token(load_model("llama-3.1-70b"), 2) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert kv_bytes_per_token(load_model("smollm2-135m"), 2) == 2 * 30 * 3 * 64 * 2
    assert kv_bytes_per_token(load_model("llama-3.1-8b"), 1) == 65_536  # fp8 KV halves it


def test_explicit_head_dim_is_used() -> None:
    """Gemma 3 27B: head_dim 128, not hidden / heads = 168."""
    gemma3 = load_model("gemma-3-27b")
    assert {g.head_dim for g in gemma3.attention} == {128}
    assert kv_bytes_per_token(gemma3, 2) == 62 * 2 * 16 * 128 * 2


def test_gemma_3_sliding_layers_stop_at_the_window() -> None:
    gemma3 = load_model("gemma-3-27b")
    sliding, full = 52 * 2 * 16 * 128 * 2, 10 * 2 * 16 * 128 * 2
    assert kv_bytes_per_sequence(gemma3, 32_768, 2) == sliding * 1024 + full * 32_768 == 3_120_562_176
    assert kv_bytes_per_sequence(gemma3, 512, 2) == (sliding + full) * 512


def test_gemma_4_mixed_layers_and_k_equals_v() -> None:
    gemma = load_model("gemma-4-31b")
    sliding = 50 * 2 * 16 * 256 * 2  # 819,200 B per token, up to the 1024-token window
    full = 10 * 1 * 4 * 512 * 2  # K=V: one tensor of 4 heads × 512 on each global layer
    assert kv_bytes_per_token(gemma, 2) == sliding + full == 860_160
    assert kv_bytes_per_sequence(gemma, 4096, 2) == sliding * 1024 + full * 4096 == 1_006_632_960
    without_sharing = replace(gemma, attention=tuple(replace(g, k_eq_v=False) for g in gemma.attention))
    assert kv_bytes_per_token(without_sharing, 2) == sliding + 2 * full


def test_mistral_every_layer_slides() -> None:
    mistral = load_model("mistral-7b-v0.1")
    assert kv_bytes_per_sequence(mistral, 32_768, 2) == kv_bytes_per_sequence(mistral, 4096, 2) == 131_072 * 4096


def test_tensor_parallel_kv_heads_per_device() -> None:
    """vLLM: each GPU holds max(1, kv_heads / tp) heads, so past tp = kv_heads the heads replicate."""
    llama = load_model("llama-3.1-8b")
    h100 = load_hardware("H100-SXM")
    assert kv_bytes_per_token(llama, 2, 4, h100) == 131_072 / 4
    assert kv_bytes_per_token(llama, 2, 16, h100) == 131_072 / 8  # one head each, not half a head


@pytest.mark.parametrize(
    ("model", "sizes"),
    [("llama-3.1-8b", (1, 2, 4, 8, 16, 32)), ("qwen2.5-7b", (1, 2, 4, 28)), ("smollm2-135m", (1, 3, 9)),
     ("gemma-4-31b", (1, 2, 4, 8, 16, 32))],
)  # fmt: skip
def test_valid_tensor_parallel_sizes(model: str, sizes: tuple[int, ...]) -> None:
    assert valid_tp_sizes(load_model(model)) == sizes


@pytest.mark.parametrize(("precision", "devices"), [("bf16", 4), ("int8", 2), ("int4", 1)])
def test_gemma_4_31b_on_24_gb_cards(precision: str, devices: int) -> None:
    r = plan("gemma-4-31b", "RTX-4090", precision=precision, context=4096)
    assert r.min_devices == devices
    assert r.fits_on_one_device is (devices == 1)


def test_llama_70b_needs_two_h100s_in_bf16() -> None:
    r = plan("llama-3.1-70b", "H100-SXM")
    assert (r.min_devices, r.devices, r.fits) == (2, 2, True)
    assert not r.fits_on_one_device


def test_max_concurrency_hand_worked() -> None:
    """Vidur's rule with our overheads: ⌊(usable − weights − runtime − activations) ÷ per-sequence⌋."""
    r = plan("llama-3.1-8b", "H100-SXM", context=8192, concurrency=16)
    usable = 0.9 * 80 * GIB
    weights = 8_030_261_248 * 2
    activations = 2048 * (4 * 4096 + 3 * 14336) * 2
    per_sequence = 131_072 * 8192 + 128_256 * 4  # KV + one fp32 logits row
    assert r.max_concurrency == int((usable - weights - GIB - activations) // per_sequence) == 55


def test_fitting_uses_headroom_and_comfort() -> None:
    r = plan("llama-3.1-70b", "A100-SXM-80GB", precision="int8", context=2048)
    assert r.devices == 1 and r.fits and not r.memory.comfortable  # 70.6 GB of weights on 80 GiB: < 1.3 × weights
    r = plan("llama-3.1-8b", "RTX-4090", context=2048)
    assert r.fits and r.memory.comfortable  # 16.1 GB on 24 GiB (25.8 GB): ≥ 1.3 × weights


def test_moe_keeps_every_expert_in_memory() -> None:
    mixtral = load_model("mixtral-8x7b")
    assert mixtral.moe == MoE(8, 2)
    assert mixtral.weight_bytes(get_precision("bf16")).total == pytest.approx(46.7e9 * 2, rel=0.01)
    assert mixtral.params_active == pytest.approx(12.9e9, rel=0.01)
    assert plan("mixtral-8x7b", "H100-SXM").min_devices == 2


@settings(max_examples=30, deadline=None)
@given(context=st.integers(1, 131_072), model=st.sampled_from(["llama-3.1-8b", "gemma-4-31b", "mistral-7b-v0.1"]))
def test_max_concurrency_is_the_edge(context: int, model: str) -> None:
    r = plan(model, "H100-SXM", devices=2, context=context)
    n = r.max_concurrency
    assert n is not None and n >= 1
    assert plan(model, "H100-SXM", devices=2, context=context, concurrency=n).fits
    assert not plan(model, "H100-SXM", devices=2, context=context, concurrency=n + 1).fits


@settings(max_examples=20, deadline=None)
@given(concurrency=st.integers(1, 256))
def test_max_context_is_the_edge(concurrency: int) -> None:
    r = plan("llama-3.1-8b", "L40S", devices=1, concurrency=concurrency, context=1024)
    if r.max_context is None:  # not even a one-token context fits this many sequences
        assert not plan("llama-3.1-8b", "L40S", devices=1, concurrency=concurrency, context=1).fits
        return
    assert plan("llama-3.1-8b", "L40S", devices=1, concurrency=concurrency, context=r.max_context).fits
    if r.max_context == load_model("llama-3.1-8b").max_context:
        return  # capped at the model's own limit: no longer context to try
    assert not plan("llama-3.1-8b", "L40S", devices=1, concurrency=concurrency, context=r.max_context + 1).fits


@settings(max_examples=40, deadline=None)
@given(a=st.integers(1, 300_000), b=st.integers(1, 300_000))
def test_kv_grows_with_context_and_sliding_layers_cap(a: int, b: int) -> None:
    gemma = load_model("gemma-4-31b")
    lo, hi = sorted((a, b))
    assert kv_bytes_per_sequence(gemma, lo, 2) <= kv_bytes_per_sequence(gemma, hi, 2)
    assert kv_bytes_per_sequence(gemma, hi, 2) <= 819_200 * 1024 + 40_960 * hi
