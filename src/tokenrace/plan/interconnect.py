"""Communication on a token's path: how the devices are laid out, and what crossing the links costs.

A decode step of a model split over devices cannot finish before the token's hidden state has made
every trip the layout asks for:

- tensor parallelism: each layer ends its attention and its MLP with an all-reduce of the hidden
  state over the devices of the group (Megatron-LM's two all-reduces per layer, as vLLM runs them);
- pipeline parallelism: the hidden state moves to the next stage's devices once per stage boundary.

Each trip costs its hops × per-hop latency plus its bytes ÷ link bandwidth (the alpha-beta model NCCL's
own tuner uses). These trips sit on the token's dependency chain (a layer cannot start before the
previous reduction arrives), so they add to the step; the planner does not assume they overlap with
the layer's weight reads. Where no source gives a link's latency it counts as 0, which only raises
the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenrace.errors import InvalidInput
from tokenrace.plan.catalog import Hardware, Link
from tokenrace.plan.memory import shards_by_heads, valid_tp_sizes
from tokenrace.plan.modelspec import ModelSpec

# The hidden state travels in 16 bits: vLLM and TensorRT-LLM all-reduce in the activation dtype, FP8
# weights included.
ACTIVATION_BYTES = 2


@dataclass(frozen=True)
class Layout:
    """How the plan assumes the model is spread: a group of devices works on each layer at once, and
    a token crosses `stages` such groups in turn."""

    kind: str  # single | tensor | tensor+pipeline | sram
    devices: int
    group: int  # devices working on the token at once (tensor-parallel size; chips per layer)
    stages: int  # pipeline stages the token crosses in turn
    layers: int
    link: Link | None  # the link inside a group
    stage_link: Link | None  # the link between stages

    @property
    def layers_per_stage(self) -> float:
        return self.layers / self.stages

    def describe(self) -> str:
        if self.kind == "single":
            return "one device"
        if self.kind == "sram":
            return (f"{self.group} chip(s) per layer (tensor-parallel), {self.stages} pipeline stage(s) of "
                    f"~{self.layers_per_stage:.3g} layer(s)")  # fmt: skip
        text = f"tensor-parallel over {self.group}"
        if self.stages > 1:
            text += f", {self.stages} pipeline stages"
        return text


@dataclass(frozen=True)
class Trip:
    """One kind of communication on the token's path, `count` times per step."""

    what: str  # "all-reduce" | "stage hop"
    algorithm: str  # one-shot | ring | hop
    count: int
    group: int
    hops: int  # latency-bound steps per trip
    bytes_on_link: float  # bytes the busiest link carries per trip
    link: Link

    @property
    def latency_s(self) -> float:
        return self.count * self.hops * self.link.hop_latency_s

    @property
    def transfer_s(self) -> float:
        return self.count * self.bytes_on_link / self.link.bandwidth_bytes_per_s

    @property
    def seconds(self) -> float:
        return self.latency_s + self.transfer_s


@dataclass(frozen=True)
class CommPath:
    """Every trip the hidden state makes in one decode step."""

    message_bytes: float  # the hidden state of the whole batch
    trips: tuple[Trip, ...]

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.trips)

    @property
    def latency_s(self) -> float:
        return sum(t.latency_s for t in self.trips)

    @property
    def transfer_s(self) -> float:
        return sum(t.transfer_s for t in self.trips)


# ---------------------------------------------------------------------------------------------
# Layouts


def _pick_link(hw: Hardware, name: str | None, group: int) -> Link | None:
    """The named link, or the first node link that can join `group` devices."""
    if name is not None:
        link = hw.link(name)
        if link is not None and link.max_group is not None and group > link.max_group:
            raise InvalidInput("link", f"{link.name} joins at most {link.max_group} devices, not {group}")
        return link
    fits = [x for x in hw.links if x.scope == "node" and (x.max_group is None or group <= x.max_group)]
    return fits[0] if fits else hw.link(None)


def _gpu_layout(model: ModelSpec, hw: Hardware, devices: int, link: str | None) -> Layout:
    per_node = hw.devices_per_node
    if devices <= per_node:
        group, stages = devices, 1
    else:
        # Tensor-parallel inside a node, pipeline stages across nodes (vLLM's multi-node advice).
        sizes = [tp for tp in valid_tp_sizes(model) if tp <= per_node and devices % tp == 0]
        group = max(sizes) if sizes else 1
        stages = math.ceil(devices / group)
    node_link = _pick_link(hw, link, group) if group > 1 else (hw.link(link) if link else None)
    stage_link = (hw.cluster_link() or node_link) if stages > 1 else None
    kind = "tensor+pipeline" if stages > 1 else "tensor"
    return Layout(kind, devices, group, stages, model.num_layers, node_link, stage_link)


def _sram_layout(model: ModelSpec, hw: Hardware, chips: int, link: str | None) -> Layout:
    """The plan's assumption, not the compiler's: every layer gets the same number of chips
    (⌈chips ÷ layers⌉, tensor-parallel), and the layers run as a pipeline across the chip groups."""
    group = max(1, math.ceil(chips / model.num_layers))
    stages = max(1, math.ceil(chips / group))
    chosen = _pick_link(hw, link, group) if (group > 1 or stages > 1) else None
    return Layout("sram", chips, group, stages, model.num_layers, chosen, chosen)


def layout_for(model: ModelSpec, hw: Hardware, devices: int, link: str | None = None) -> Layout:
    if devices <= 1 or hw.kind == "cpu":
        return Layout("single", 1, 1, 1, model.num_layers, hw.link(link) if link else None, None)
    if hw.kind == "sram":
        return _sram_layout(model, hw, devices, link)
    if shards_by_heads(hw):
        return _gpu_layout(model, hw, devices, link)
    return Layout("single", devices, devices, 1, model.num_layers, None, None)


# ---------------------------------------------------------------------------------------------
# Collectives


def all_reduce(link: Link, group: int, message: float, count: int) -> Trip:
    """The faster of two textbook algorithms for `group` devices reducing `message` bytes each:

    one-shot: every device sends its whole message to every peer at once (one hop; a switch port
    carries (group − 1) messages, a direct link carries one; needs a link to each peer);
    ring: reduce-scatter then all-gather, 2 (group − 1) hops of message ÷ group bytes each.
    """
    ring = Trip("all-reduce", "ring", count, group, 2 * (group - 1), 2 * (group - 1) / group * message, link)
    if link.topology == "direct" and group - 1 > link.count:
        return ring
    per_link = message if link.topology == "direct" else (group - 1) * message
    one_shot = Trip("all-reduce", "one-shot", count, group, 1, per_link, link)
    return min((one_shot, ring), key=lambda t: t.seconds)


def decode_comm(model: ModelSpec, layout: Layout, batch: int) -> CommPath | None:
    """The trips of one decode step; None when the layout has a single device (nothing to cross)."""
    message = batch * model.hidden_size * ACTIVATION_BYTES
    trips = []
    if layout.group > 1 and layout.link is not None:
        trips.append(all_reduce(layout.link, layout.group, message, 2 * model.num_layers))
    if layout.stages > 1 and layout.stage_link is not None:
        trips.append(Trip("stage hop", "hop", layout.stages - 1, 2, 1, message, layout.stage_link))
    if not trips:
        return None
    return CommPath(message, tuple(trips))


__all__ = ["ACTIVATION_BYTES", "CommPath", "Layout", "Trip", "all_reduce", "decode_comm", "layout_for"]
