"""Speed of light: the fastest a step can possibly run on the given devices.

A step takes at least max(bytes it must move ÷ bandwidth, FLOPs it must do ÷ peak compute) on the
devices that work on the token at once, plus the communication on the token's path (interconnect.py).
Work splits perfectly inside a tensor-parallel group; the stages of a pipeline work in turn, so a
token's bytes are read at the group's bandwidth, not at every device's. The figure is an upper bound
on speed, not a prediction.

Decode (one token for each of B sequences) reads the weights once for the whole batch (the LM head in
full, the input embedding one row per token, and for MoE only the experts the batch's tokens are
routed to) and the KV cache of every sequence. Prefill of N prompt tokens reads the weights once,
writes N tokens of KV, and does 2 · params · N FLOPs plus attention; it is the TTFT lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenrace.plan.catalog import Hardware
from tokenrace.plan.interconnect import CommPath, Layout, decode_comm
from tokenrace.plan.memory import kv_bytes_per_sequence
from tokenrace.plan.modelspec import AttentionGroup, ModelSpec, WeightBytes
from tokenrace.plan.precision import Precision


@dataclass(frozen=True)
class StepBound:
    """One step's minimum time: the work of one device of the group that holds the token at a time,
    plus the communication on the token's path."""

    tokens: int  # tokens processed in the step (B for decode, N for prefill)
    weight_bytes: float  # per device
    kv_bytes: float  # per device: read (decode) or written (prefill)
    flops: float  # per device
    bandwidth: float
    compute: float | None  # None: no compute figure for this device (a CPU), memory bound only
    compute_dtype: str
    expert_fraction: float | None
    group: int = 1  # devices that work on the token at once; the bytes and FLOPs above are per device of it
    comm: CommPath | None = None

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def memory_s(self) -> float:
        return self.bytes / self.bandwidth

    @property
    def compute_s(self) -> float | None:
        return self.flops / self.compute if self.compute else None

    @property
    def comm_s(self) -> float:
        return self.comm.seconds if self.comm else 0.0

    @property
    def seconds(self) -> float:
        return max(self.memory_s, self.compute_s or 0.0) + self.comm_s

    @property
    def bound_by(self) -> str:
        """The largest term: memory, compute or communication."""
        terms = {"memory": self.memory_s, "compute": self.compute_s or 0.0, "communication": self.comm_s}
        return max(terms, key=lambda k: terms[k])


def lm_head_params(model: ModelSpec) -> int:
    """The matrix that turns the last hidden state into logits: the embedding when tied."""
    return model.params.embedding if model.tie_embeddings else model.params.lm_head


def layer_params_active(model: ModelSpec) -> float:
    """Parameters in the layers one token goes through (its top-k experts, not all of them)."""
    share = model.moe.active / model.moe.experts if model.moe else 1.0
    return model.params.dense + model.params.experts * share


def weight_bytes_read(model: ModelSpec, weights: WeightBytes, tokens: int) -> tuple[float, float | None]:
    """(bytes read for one step over `tokens` tokens, share of expert bytes read or None)."""
    head = weights.embedding if model.tie_embeddings else weights.lm_head
    if not model.moe:
        return weights.dense + head + weights.experts, None
    share = model.moe.fraction_read(tokens)
    return weights.dense + head + weights.experts * share, share


def attended_tokens(group: AttentionGroup, context: int) -> int:
    return min(context, group.window) if group.window else context


def attention_flops_per_token(model: ModelSpec, context: int) -> float:
    """QKᵀ and AV: 2 · head_dim FLOPs each, per query head and attended token: 4 · heads · head_dim · tokens."""
    return sum(g.layers * 4 * g.q_heads * g.head_dim * attended_tokens(g, context) for g in model.attention)


def causal_pairs(tokens: int, window: int | None) -> int:
    """Σ over prompt positions t = 1..N of the tokens t attends to: min(t, window)."""
    if window is None or window >= tokens:
        return tokens * (tokens + 1) // 2
    return window * (window + 1) // 2 + (tokens - window) * window


def prefill_attention_flops(model: ModelSpec, tokens: int) -> float:
    return sum(g.layers * 4 * g.q_heads * g.head_dim * causal_pairs(tokens, g.window) for g in model.attention)


def _compute(hw: Hardware, precision: Precision) -> tuple[float | None, str]:
    return hw.flops_for(precision.compute_dtype)


def decode_step(
    model: ModelSpec,
    hw: Hardware,
    devices: int,
    precision: Precision,
    kv_bytes: float,
    context: int,
    batch: int,
    layout: Layout | None = None,
) -> StepBound:
    """One decode step for `batch` sequences each holding `context` tokens of KV. Without a layout the
    devices form one group and communication is free."""
    group = layout.group if layout else devices
    weights, share = weight_bytes_read(model, model.weight_bytes(precision), batch)
    kv = batch * kv_bytes_per_sequence(model, context, kv_bytes, group, hw)
    flops = batch * (
        2 * (layer_params_active(model) + lm_head_params(model)) + attention_flops_per_token(model, context)
    )
    compute, dtype = _compute(hw, precision)
    comm = decode_comm(model, layout, batch) if layout else None
    return StepBound(batch, weights / group, kv, flops / group, hw.bandwidth_bytes_per_s, compute, dtype, share,
                     group, comm)  # fmt: skip


def prefill(
    model: ModelSpec, hw: Hardware, devices: int, precision: Precision, kv_bytes: float, tokens: int
) -> StepBound:
    """One request's prompt of `tokens` tokens; logits only for the last position. All devices count:
    a prompt's tokens can fill every pipeline stage at once. Communication is not counted (a prompt's
    all-reduces carry many tokens each and overlap with long matmuls)."""
    weights, share = weight_bytes_read(model, model.weight_bytes(precision), tokens)
    kv = kv_bytes_per_sequence(model, tokens, kv_bytes, devices, hw)
    flops = 2 * layer_params_active(model) * tokens + 2 * lm_head_params(model) + prefill_attention_flops(model, tokens)
    compute, dtype = _compute(hw, precision)
    return StepBound(tokens, weights / devices, kv, flops / devices, hw.bandwidth_bytes_per_s, compute, dtype, share,
                     devices)  # fmt: skip
