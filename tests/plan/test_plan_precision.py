"""Bits per weight of each precision, and name handling."""

from __future__ import annotations

import pytest

from tokenrace.errors import UsageError
from tokenrace.plan.precision import get_precision, kv_dtype_bytes


@pytest.mark.parametrize(
    ("name", "bits"),
    [
        ("fp32", 32), ("bf16", 16), ("FP16", 16), ("float16", 16), ("fp8", 8), ("int8", 8), ("int4", 4),
        # GGUF blocks: Q4_0 = fp16 scale + 32 nibbles = 18 B / 32; Q8_0 = 34 B / 32; Q6_K = 210 B / 256.
        ("q4_0", 4.5), ("Q4_1", 5.0), ("q8_0", 8.5), ("q6_k", 6.5625),
        # AWQ/GPTQ: 4 bits + one fp16 scale and one 4-bit zero per 128 weights.
        ("awq", 4 + 16 / 128 + 4 / 128), ("gptq", 4 + 16 / 128 + 4 / 128),
    ],
)  # fmt: skip
def test_bits_per_weight(name: str, bits: float) -> None:
    assert get_precision(name).bits_per_weight == pytest.approx(bits)


def test_q4_k_m_uses_llama_cpp_effective_size() -> None:
    # quantize.cpp: Q4_K_M is 3.80 GiB for LLaMA-7B (6.74e9 weights) -> 4.84 bits per weight.
    assert get_precision("Q4_K_M").bits_per_weight == pytest.approx(4.84, abs=0.01)
    assert get_precision("q4_k").name == "q4_k_m"


def test_packed_formats_keep_embeddings_at_16_bits() -> None:
    assert get_precision("awq-int4").embedding_bits == 16
    assert get_precision("int4").embedding_bits == 4  # the guides' idealised 0.5 byte per parameter


def test_unknown_precision_lists_close_names() -> None:
    with pytest.raises(UsageError, match=r"unknown precision 'int5'.*close: .*int"):
        get_precision("int5")


def test_kv_dtypes() -> None:
    assert kv_dtype_bytes("fp16") == 2
    assert kv_dtype_bytes("auto") == 2
    assert kv_dtype_bytes("fp8") == 1
    assert kv_dtype_bytes("q8_0") == pytest.approx(34 / 32)
    with pytest.raises(UsageError, match="unknown KV dtype"):
        kv_dtype_bytes("int3")
