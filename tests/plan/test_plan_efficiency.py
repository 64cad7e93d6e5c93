"""Measurements as a share of the bound, refusals for a launcher, and the CPU probe."""

from __future__ import annotations

import pytest

from tokenrace.plan import check_fit, efficiency, load_hardware, measure_cpu_bandwidth, plan


def test_efficiency_percentages() -> None:
    r = plan("llama-3.1-8b", "H100-SXM", context=1024, concurrency=4)
    e = efficiency(
        r.decode_tokens_per_s_bound * 0.71,
        r.ttft_ms_bound * 2,
        r,
        measured_aggregate_tok_s=r.aggregate_tokens_per_s_bound / 2,
    )
    assert e.decode_pct_of_bound == pytest.approx(71)
    assert e.ttft_pct_of_bound == pytest.approx(50)  # a time: bound ÷ measured
    assert e.aggregate_pct_of_bound == pytest.approx(50)
    assert e.warnings == []


def test_energy_efficiency_against_tokens_per_joule_at_tdp() -> None:
    r = plan("llama-3.1-8b", "H100-SXM", context=1024, concurrency=8)
    reference = r.aggregate_tokens_per_s_bound / 700
    e = efficiency(None, None, r, measured_tokens_per_joule=reference / 4)
    assert e.decode_tokens_per_joule_at_tdp == pytest.approx(reference)
    assert e.tokens_per_joule_pct_of_tdp_reference == pytest.approx(25)
    no_tdp = efficiency(None, None, plan("llama-3.1-8b", "TPU-v5e", devices=2), measured_tokens_per_joule=1.0)
    assert no_tdp.decode_tokens_per_joule_at_tdp is None and no_tdp.tokens_per_joule_pct_of_tdp_reference is None


def test_undefined_is_none_never_zero() -> None:
    r = plan("llama-3.1-8b", "H100-SXM")
    e = efficiency(None, 0, r)
    assert e.decode_pct_of_bound is None and e.ttft_pct_of_bound is None and e.aggregate_pct_of_bound is None


def test_beating_the_bound_warns() -> None:
    r = plan("llama-3.1-8b", "RTX-4090", context=512)
    e = efficiency(r.decode_tokens_per_s_bound * 1.3, r.ttft_ms_bound / 2, r)
    assert len(e.warnings) == 2
    assert all(w.message.startswith("measurement beats the bound: ") for w in e.warnings)
    assert "decode" in e.warnings[0].message and "TTFT" in e.warnings[1].message


def test_check_fit_refuses_with_a_fix() -> None:
    v = check_fit("gemma-4-31b", "RTX-4090", 1, "fp16", 4096, 1)
    assert not v.fits
    assert v.message.startswith("Gemma 4 31B (30.7B) in fp16 needs ~61.4 GB of weights, but this GPU has 24 GiB")
    assert v.message.endswith(": use an INT4 AWQ checkpoint, or --tensor-parallel-size 4")
    assert "\n" not in v.message and v.min_devices == 4


def test_check_fit_names_kv_fixes_when_the_weights_fit() -> None:
    v = check_fit("llama-3.1-8b", "RTX-4090", 1, None, 8192, 16)
    assert not v.fits
    assert "the weights fit" in v.message and "KV cache" in v.message
    assert any(s.startswith("lower --max-model-len to ") for s in v.suggestions)
    assert "use --kv-cache-dtype fp8" not in v.suggestions or v.plan.kv_dtype == "fp16"
    assert "--tensor-parallel-size 2" in v.suggestions


def test_check_fit_accepts() -> None:
    v = check_fit("llama-3.1-8b", "H100-SXM", 1, "bf16", 8192, 16)
    assert v.fits and "fits on this GPU" in v.message


def test_cpu_bandwidth_probe() -> None:
    bandwidth = measure_cpu_bandwidth(0.05, buffer_bytes=64 * 2**20)
    assert 1e8 < bandwidth < 1e13


@pytest.mark.slow
def test_cpu_hardware_is_measured_once() -> None:
    first, second = load_hardware("cpu"), load_hardware("cpu")
    assert first is second and first.measured
    assert first.bandwidth_bytes_per_s > 1e8 and first.memory_bytes > 0
    assert "measured" in first.source


@pytest.mark.slow
def test_embedded_model_on_this_cpu(smollm2_gguf) -> None:  # type: ignore[no-untyped-def]
    r = plan(str(smollm2_gguf), "cpu", context=256, input_tokens=128)
    assert r.fits and r.devices == 1
    assert r.decode.compute is None and r.decode.bound_by == "memory"
    assert r.ttft_ms_bound > 0 and r.decode_tokens_per_s_bound > 0
