"""Weight precisions and KV-cache dtypes: how many bits each weight really costs.

Plain names (`int8`, `fp8`, `int4`) follow the guides' rule: every weight, embeddings included, at
that width (2 / 1 / 0.5 bytes per parameter). Packed formats carry their scales: AWQ and GPTQ store a
16-bit scale and a 4-bit zero point per group of 128 weights and keep the embeddings at 16 bits;
GGUF types cost what their block layout costs (Q4_0: 18 bytes per 32 weights = 4.5 bits).
GGUF file types that mix block types (Q4_K_M keeps some tensors at Q6_K) use the effective bits per
weight of llama.cpp's own quantize table for LLaMA-7B.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from tokenrace.errors import InvalidInput

AWQ_GROUP = 128
# A 4-bit weight plus, per group of 128, one fp16 scale and one packed 4-bit zero point.
GROUP_INT4_BITS = 4 + 16 / AWQ_GROUP + 4 / AWQ_GROUP


@dataclass(frozen=True)
class Precision:
    """How weights are stored, and which compute units work on them."""

    name: str
    bits_per_weight: float  # matrices inside the layers, scales included
    embedding_bits: float  # token embedding and LM head
    compute_dtype: str  # key into Hardware.flops
    note: str
    gguf: bool = False

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8


def _p(name: str, bits: float, emb: float | None, compute: str, note: str, gguf: bool = False) -> Precision:
    return Precision(name, bits, bits if emb is None else emb, compute, note, gguf)


def _block(bytes_per_block: int, weights_per_block: int) -> float:
    return bytes_per_block * 8 / weights_per_block


# llama.cpp's quantize table gives file sizes for LLaMA-v1-7B (6.74e9 weights, GiB); bits = size·8/weights.
_LLAMA7B = 6.738e9


def _mix(gib: float) -> float:
    return round(gib * 2**30 * 8 / _LLAMA7B, 2)


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        _p("fp32", 32, None, "fp32", "4 bytes per weight"),
        _p("bf16", 16, None, "bf16", "2 bytes per weight"),
        _p("fp16", 16, None, "fp16", "2 bytes per weight"),
        _p("fp8", 8, None, "fp8", "1 byte per weight (ideal: embeddings too)"),
        _p("int8", 8, None, "int8", "1 byte per weight (ideal: embeddings too)"),
        _p("int4", 4, None, "fp16", "0.5 byte per weight (ideal: no scales, embeddings too)"),
        _p("awq-int4", GROUP_INT4_BITS, 16, "fp16", "4 bits + fp16 scale and 4-bit zero per 128; embeddings fp16"),
        _p("gptq-int4", GROUP_INT4_BITS, 16, "fp16", "4 bits + fp16 scale and 4-bit zero per 128; embeddings fp16"),
        _p(
            "gptq-int8",
            8 + 16 / 128 + 8 / 128,
            16,
            "fp16",
            "8 bits + fp16 scale and 8-bit zero per 128; embeddings fp16",
        ),
        _p("q4_0", _block(18, 32), None, "int8", "GGUF block: fp16 scale + 32 × 4 bits", True),
        _p("q4_1", _block(20, 32), None, "int8", "GGUF block: fp16 scale and min + 32 × 4 bits", True),
        _p("q5_0", _block(22, 32), None, "int8", "GGUF block: 22 bytes per 32", True),
        _p("q5_1", _block(24, 32), None, "int8", "GGUF block: 24 bytes per 32", True),
        _p("q8_0", _block(34, 32), None, "int8", "GGUF block: fp16 scale + 32 × 8 bits", True),
        _p("q2_k", _mix(2.63), None, "int8", "GGUF Q2_K mix (llama.cpp quantize table)", True),
        _p("q3_k_s", _mix(2.75), None, "int8", "GGUF Q3_K_S mix (llama.cpp quantize table)", True),
        _p("q3_k_m", _mix(3.07), None, "int8", "GGUF Q3_K_M mix (llama.cpp quantize table)", True),
        _p("q3_k_l", _mix(3.35), None, "int8", "GGUF Q3_K_L mix (llama.cpp quantize table)", True),
        _p("q4_k_s", _mix(3.59), None, "int8", "GGUF Q4_K_S mix (llama.cpp quantize table)", True),
        _p("q4_k_m", _mix(3.80), None, "int8", "GGUF Q4_K_M mix: Q4_K with some Q6_K (llama.cpp quantize table)", True),
        _p("q5_k_s", _mix(4.33), None, "int8", "GGUF Q5_K_S mix (llama.cpp quantize table)", True),
        _p("q5_k_m", _mix(4.45), None, "int8", "GGUF Q5_K_M mix (llama.cpp quantize table)", True),
        _p("q6_k", _block(210, 256), None, "int8", "GGUF block: 210 bytes per 256", True),
    )
}

PRECISION_ALIASES: dict[str, str] = {
    "float32": "fp32", "f32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16", "f16": "fp16", "half": "fp16",
    "float8": "fp8", "fp8_e4m3": "fp8", "e4m3": "fp8", "w8a8-fp8": "fp8",
    "w8a8": "int8", "w8a8-int8": "int8", "i8": "int8",
    "i4": "int4", "4bit": "int4",
    "awq": "awq-int4", "w4a16": "awq-int4",
    "gptq": "gptq-int4", "q3_k": "q3_k_m", "q4_k": "q4_k_m", "q5_k": "q5_k_m",
}  # fmt: skip

# KV-cache element sizes in bytes. q8_0 / q4_0 are llama.cpp's quantized caches (block scales included).
KV_DTYPES: dict[str, float] = {
    "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "int8": 1.0,
    "q8_0": 34 / 32, "q4_0": 18 / 32,
}  # fmt: skip

_KV_ALIASES = {"auto": "fp16", "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "f16": "fp16"}


def _key(name: str) -> str:
    return name.strip().lower().replace(" ", "").replace("_", "-")


def get_precision(name: str) -> Precision:
    """`fp16`, `BF16`, `awq`, `Q4_K_M`, `int4` ... -> Precision, or a UsageError naming close matches."""
    raw = name.strip().lower()
    for candidate in (raw, raw.replace("-", "_"), _key(raw)):
        candidate = PRECISION_ALIASES.get(candidate, candidate)
        if candidate in PRECISIONS:
            return PRECISIONS[candidate]
    names = sorted(PRECISIONS) + sorted(PRECISION_ALIASES)
    close = difflib.get_close_matches(raw, names, n=4, cutoff=0.5)
    hint = f"; close: {', '.join(close)}" if close else f"; known: {', '.join(sorted(PRECISIONS))}"
    raise InvalidInput("precision", f"unknown precision {name!r}{hint}")


def kv_dtype_bytes(name: str) -> float:
    """Bytes per KV element for `fp16`, `bf16`, `fp8`, `q8_0` ..."""
    key = _KV_ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in KV_DTYPES:
        raise InvalidInput("kv_dtype", f"unknown KV dtype {name!r}; known: {', '.join(KV_DTYPES)}")
    return KV_DTYPES[key]


def precision_for_gguf_file_type(file_type_name: str) -> Precision | None:
    """`MOSTLY_Q4_K_M` (gguf.LlamaFileType name) -> the matching precision, when we know it."""
    short = file_type_name.removeprefix("MOSTLY_").removeprefix("ALL_").lower()
    short = {"f16": "fp16", "bf16": "bf16", "f32": "fp32"}.get(short, short)
    return PRECISIONS.get(short)
