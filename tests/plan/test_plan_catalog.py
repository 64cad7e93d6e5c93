"""The catalogs: every row sourced, the reference devices and models present, names matched."""

from __future__ import annotations

import pytest

from tokenrace.errors import UsageError
from tokenrace.plan import catalog_hardware, catalog_models, load_hardware, load_model
from tokenrace.plan.catalog import hardware_rows, model_rows

REFERENCE_DEVICES = ["H100-SXM", "H100-PCIe", "H200-SXM", "B200", "A100-SXM-40GB", "A100-SXM-80GB", "A10G", "L4", "L40S",
                     "RTX-4090", "RTX-3090", "RTX-5090", "MI300X", "TPU-v5e", "Groq-LPU", "cpu"]  # fmt: skip
REFERENCE_MODELS = ["gemma-4-31b", "gemma-3-27b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-32b", "qwen2.5-72b",
                    "mistral-7b-v0.1", "mixtral-8x7b", "smollm2-135m"]  # fmt: skip


def test_every_row_has_a_source() -> None:
    for row in [*hardware_rows(), *model_rows()]:
        assert row.source, row.name


def test_reference_devices_and_models_are_there() -> None:
    assert set(REFERENCE_DEVICES) <= {r.name for r in hardware_rows()}
    assert set(REFERENCE_MODELS) <= {r.name for r in model_rows()}


@pytest.mark.parametrize(
    ("name", "memory_gb", "bandwidth_tb_s", "bf16_tflops"),
    [("H100-SXM", 80, 3.35, 989.5), ("H200-SXM", 141, 4.8, 989.4), ("A100-SXM-40GB", 40, 1.555, 312), ("L4", 24, 0.3, 121),
     ("MI300X", 192, 5.3, 1307), ("TPU-v5e", 16, 0.819, 197)],
)  # fmt: skip
def test_reference_figures(name: str, memory_gb: int, bandwidth_tb_s: float, bf16_tflops: float) -> None:
    hw = load_hardware(name)
    assert hw.memory_bytes == memory_gb * 2**30  # HBM/GDDR capacities are binary
    assert hw.bandwidth_bytes_per_s == pytest.approx(bandwidth_tb_s * 1e12)
    assert hw.flops["bf16"] == pytest.approx(bf16_tflops * 1e12)


def test_groq_is_an_sram_chip() -> None:
    groq = load_hardware("groq")
    assert (groq.kind, groq.memory_bytes, groq.bandwidth_bytes_per_s) == ("sram", 230_000_000, 80e12)


def test_counted_parameters_match_the_published_sizes() -> None:
    for model in catalog_models():
        assert model.params_published
        assert model.params_total == pytest.approx(model.params_published, rel=0.02), model.name


@pytest.mark.parametrize(
    ("query", "name"),
    [("llama-3.1-8b", "Llama 3.1 8B"), ("meta-llama/Llama-3.1-8B-Instruct", "Llama 3.1 8B"), ("Llama 3.3 70B", "Llama 3.1 / 3.3 70B"),
     ("google/gemma-4-31b-it", "Gemma 4 31B"), ("gemma4-31b", "Gemma 4 31B"), ("SmolLM2-135M", "SmolLM2 135M"),
     ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5 7B"), ("mistralai/Mixtral-8x7B-Instruct-v0.1", "Mixtral 8x7B")],
)  # fmt: skip
def test_model_aliases(query: str, name: str) -> None:
    assert load_model(query).name == name


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("h100-sxm", "H100-SXM"),
        ("H100 SXM5", "H100-SXM"),
        ("rtx 4090", "RTX-4090"),
        ("4090", "RTX-4090"),
        ("LPU", "Groq-LPU"),
    ],
)
def test_hardware_aliases(query: str, name: str) -> None:
    assert load_hardware(query).name == name


def test_unknown_names_list_close_matches_in_one_line() -> None:
    with pytest.raises(UsageError) as err:
        load_model("lama-3.1-8b")
    assert "\n" not in str(err.value)
    assert "unknown model 'lama-3.1-8b'" in str(err.value) and "llama-3.1-8b" in str(err.value)
    with pytest.raises(UsageError, match=r"close matches: .*H100-SXM.*H100-PCIe"):
        load_hardware("h100")  # two H100s: never guess
    with pytest.raises(UsageError, match="unknown model 'gemma-4'"):
        load_model("gemma-4")  # a family, not a size


def test_missing_local_path_is_an_error() -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_model("./nowhere/model.gguf")


def test_catalog_listing_skips_the_measured_cpu() -> None:
    assert "cpu" not in {h.name for h in catalog_hardware()}
