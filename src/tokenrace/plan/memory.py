"""Memory: weights, KV cache, runtime overhead, and whether it all fits.

Conventions (see docs/plan.md):
- usable memory per device = memory × utilization (vLLM's gpu_memory_utilization, 0.9 by default);
- "comfortable" = it fits and the device memory is at least 1.3 × the weights on it (the guides'
  30 % headroom floor over the weight estimate; they suggest up to 50 % for long contexts);
- under tensor parallelism each GPU holds max(1, kv_heads / tp) KV heads of every layer (vLLM);
  a device count that is not a valid TP size is planned with ceil(kv_heads / n) heads per device;
- SRAM systems (Groq) and CPUs split nothing by heads: weights and KV are spread evenly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenrace.plan.catalog import GIB, Hardware
from tokenrace.plan.modelspec import AttentionGroup, ModelSpec
from tokenrace.plan.precision import Precision

DEFAULT_UTILIZATION = 0.9
COMFORTABLE_HEADROOM = 0.30
# Runtime reserve per device: CUDA context, cuBLAS/NCCL workspaces and CUDA graphs on a GPU;
# llama.cpp's buffers on a CPU; nothing for a compiled SRAM pipeline.
RUNTIME_BYTES = {"gpu": 1 * GIB, "tpu": 1 * GIB, "cpu": GIB // 4, "sram": 0}
# Tokens in one prefill chunk, for peak activations (vLLM's chunked prefill; llama.cpp's n_ubatch).
PREFILL_CHUNK = {"gpu": 2048, "tpu": 2048, "cpu": 512, "sram": 0}
ACTIVATION_BYTES = 2
LOGIT_BYTES = 4  # fp32 logits: one vocabulary row per running sequence


def shards_by_heads(hw: Hardware) -> bool:
    return hw.kind in {"gpu", "tpu"}


def kv_heads_per_device(kv_heads: int, devices: int) -> int:
    return max(1, math.ceil(kv_heads / devices))


@dataclass(frozen=True)
class KVTerm:
    """One attention group's share of a sequence's KV cache on one device."""

    group: AttentionGroup
    heads: float  # KV heads held per device
    tokens: int  # tokens cached at this context
    bytes_per_token: float  # per device, all layers of the group

    @property
    def bytes(self) -> float:
        return self.bytes_per_token * self.tokens


def kv_terms(
    model: ModelSpec, context: int, kv_bytes: float, devices: int = 1, hw: Hardware | None = None
) -> list[KVTerm]:
    by_heads = hw is None or shards_by_heads(hw)
    terms = []
    for g in model.attention:
        if not g.stores_kv:
            continue
        heads: float = kv_heads_per_device(g.kv_heads, devices) if by_heads else g.kv_heads / devices
        per_token = g.layers * g.tensors_per_token() * heads * g.head_dim * kv_bytes
        terms.append(KVTerm(g, heads, g.cached_tokens(context), per_token))
    return terms


def kv_bytes_per_token(model: ModelSpec, kv_bytes: float, devices: int = 1, hw: Hardware | None = None) -> float:
    """Every caching layer, sliding ones included: the growth rate while the context is within the windows."""
    return sum(t.bytes_per_token for t in kv_terms(model, 1, kv_bytes, devices, hw))


def kv_bytes_per_token_beyond_windows(
    model: ModelSpec, kv_bytes: float, devices: int = 1, hw: Hardware | None = None
) -> float:
    """Growth once the sliding windows are full: global layers only."""
    return sum(t.bytes_per_token for t in kv_terms(model, 1, kv_bytes, devices, hw) if not t.group.window)


def kv_bytes_per_sequence(
    model: ModelSpec, context: int, kv_bytes: float, devices: int = 1, hw: Hardware | None = None
) -> float:
    return sum(t.bytes for t in kv_terms(model, context, kv_bytes, devices, hw))


def valid_tp_sizes(model: ModelSpec) -> tuple[int, ...]:
    """Tensor-parallel sizes vLLM accepts: query heads divide evenly, and for every KV-head count either
    the heads divide evenly (kv % tp == 0) or each is replicated a whole number of times (tp % kv == 0)."""
    kv_counts = model.kv_head_counts()
    ok = []
    for tp in range(1, model.num_heads + 1):
        if model.num_heads % tp:
            continue
        if all((kv % tp == 0) if tp <= kv else (tp % kv == 0) for kv in kv_counts):
            ok.append(tp)
    return tuple(ok)


@dataclass(frozen=True)
class Overhead:
    runtime: float
    activations: float
    logits_per_sequence: float
    concurrency: int
    chunk_tokens: int
    ffn_per_device: float

    @property
    def logits(self) -> float:
        return self.logits_per_sequence * self.concurrency

    @property
    def total(self) -> float:
        return self.runtime + self.activations + self.logits


def overhead(model: ModelSpec, hw: Hardware, devices: int, concurrency: int) -> Overhead:
    """Per device: the runtime reserve, peak activations of one prefill chunk, and the sampler's logits."""
    if hw.kind == "sram":
        return Overhead(0.0, 0.0, 0.0, concurrency, 0, 0.0)
    chunk = PREFILL_CHUNK.get(hw.kind, 2048)
    ffn = model.intermediate_size * (model.moe.active if model.moe else 1) / devices
    # Residual, norm and attention buffers (~4 × hidden) plus the gated MLP's gate, up and product.
    activations = chunk * (4 * model.hidden_size + 3 * ffn) * ACTIVATION_BYTES
    logits_row = float(model.vocab_size * LOGIT_BYTES)
    return Overhead(float(RUNTIME_BYTES.get(hw.kind, GIB)), activations, logits_row, concurrency, chunk, ffn)


@dataclass(frozen=True)
class MemoryPlan:
    devices: int
    weights: float  # whole model
    weights_per_device: float
    kv_per_sequence_per_device: float
    kv_per_device: float
    overhead: Overhead
    memory_per_device: int
    usable_per_device: float
    utilization: float
    concurrency: int

    @property
    def need_per_device(self) -> float:
        return self.weights_per_device + self.kv_per_device + self.overhead.total

    @property
    def fits(self) -> bool:
        return self.need_per_device <= self.usable_per_device

    @property
    def weights_fit(self) -> bool:
        return self.weights_per_device + self.overhead.runtime + self.overhead.activations <= self.usable_per_device

    @property
    def comfortable(self) -> bool:
        """The guides' line: device memory at least 1.3 × the weights it holds."""
        return self.fits and self.memory_per_device >= (1 + COMFORTABLE_HEADROOM) * self.weights_per_device

    @property
    def headroom_over_weights(self) -> float | None:
        """(device memory - weights) / weights, per device; None for a model without weights."""
        if self.weights_per_device <= 0:
            return None
        return self.memory_per_device / self.weights_per_device - 1

    @property
    def free_for_kv(self) -> float:
        """Usable bytes left per device after weights, runtime and activations."""
        return self.usable_per_device - self.weights_per_device - self.overhead.runtime - self.overhead.activations


def memory_plan(
    model: ModelSpec,
    hw: Hardware,
    devices: int,
    precision: Precision | None,
    kv_bytes: float,
    context: int,
    concurrency: int,
    utilization: float = DEFAULT_UTILIZATION,
) -> MemoryPlan:
    weights = model.weight_bytes(precision).total
    per_seq = kv_bytes_per_sequence(model, context, kv_bytes, devices, hw)
    return MemoryPlan(
        devices=devices,
        weights=weights,
        weights_per_device=weights / devices,
        kv_per_sequence_per_device=per_seq,
        kv_per_device=per_seq * concurrency,
        overhead=overhead(model, hw, devices, concurrency),
        memory_per_device=hw.memory_bytes,
        usable_per_device=hw.memory_bytes * utilization,
        utilization=utilization,
        concurrency=concurrency,
    )


def device_counts(model: ModelSpec, hw: Hardware) -> tuple[int, ...] | None:
    """The counts worth trying: valid TP sizes for GPUs/TPUs, one CPU; None (any count) for SRAM chips."""
    if hw.kind == "cpu":
        return (1,)
    if shards_by_heads(hw):
        return valid_tp_sizes(model)
    return None


def min_devices(
    model: ModelSpec,
    hw: Hardware,
    precision: Precision | None,
    kv_bytes: float,
    context: int,
    concurrency: int,
    utilization: float = DEFAULT_UTILIZATION,
) -> int | None:
    """The fewest devices that hold weights, KV for `concurrency` sequences of `context` tokens, and overhead."""
    counts = device_counts(model, hw)
    if counts is None:
        return _min_chips(model, hw, precision, kv_bytes, context, concurrency, utilization)
    for n in counts:
        if memory_plan(model, hw, n, precision, kv_bytes, context, concurrency, utilization).fits:
            return n
    return None


def _min_chips(
    model: ModelSpec,
    hw: Hardware,
    precision: Precision | None,
    kv_bytes: float,
    context: int,
    concurrency: int,
    utilization: float,
) -> int | None:
    one = memory_plan(model, hw, 1, precision, kv_bytes, context, concurrency, utilization)
    if one.usable_per_device <= 0:
        return None
    # Everything spreads evenly over the chips, so the count follows from the total.
    n = max(1, math.ceil((one.weights + one.kv_per_device) / one.usable_per_device))
    while not memory_plan(model, hw, n, precision, kv_bytes, context, concurrency, utilization).fits:
        n += 1
    return n


def max_concurrency(plan: MemoryPlan, model: ModelSpec) -> int | None:
    """Sequences of the plan's context that fit beside the weights; None when the weights do not fit."""
    if plan.free_for_kv < 0:
        return None
    per_seq = plan.kv_per_sequence_per_device + plan.overhead.logits_per_sequence
    if per_seq <= 0:
        return None
    return int(plan.free_for_kv // per_seq)


def max_context(
    model: ModelSpec,
    hw: Hardware,
    devices: int,
    precision: Precision | None,
    kv_bytes: float,
    concurrency: int,
    utilization: float = DEFAULT_UTILIZATION,
) -> int | None:
    """The longest context at which `concurrency` sequences fit (capped at the model's own limit)."""

    def fits(context: int) -> bool:
        return memory_plan(model, hw, devices, precision, kv_bytes, context, concurrency, utilization).fits

    limit = model.max_context or 1 << 21
    if not fits(1):
        return None
    if fits(limit):
        return limit
    lo, hi = 1, limit  # fits(lo) and not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
