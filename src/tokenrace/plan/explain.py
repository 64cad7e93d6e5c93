"""Words for a plan: number formats, the summary, and `--explain` (each formula with its figures in)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tokenrace.plan import probe
from tokenrace.plan.catalog import GIB, Hardware
from tokenrace.plan.interconnect import ACTIVATION_BYTES, Trip, all_reduce
from tokenrace.plan.memory import COMFORTABLE_HEADROOM, KVTerm, kv_terms
from tokenrace.plan.roofline import StepBound, attended_tokens, layer_params_active, lm_head_params

if TYPE_CHECKING:
    from tokenrace.plan.planner import PlanResult


# ---------------------------------------------------------------------------------------------
# Number formats (decimal units: GB = 1e9 bytes, TB/s = 1e12 bytes/s, as datasheets and the guides use)


def _sig(x: float, digits: int = 3) -> str:
    if x == 0:
        return "0"
    decimals = max(digits - 1 - math.floor(math.log10(abs(x))), 0)
    return f"{x:,.{decimals}f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{_sig(n / scale)} {unit}"
    return f"{n:.0f} B"


def fmt_memory(hw: Hardware) -> str:
    """Device memory as sold: binary sizes print as GiB."""
    if hw.memory_bytes and hw.memory_bytes % GIB == 0:
        return f"{hw.memory_bytes // GIB} GiB"
    return fmt_bytes(hw.memory_bytes)


def fmt_sci(n: float) -> str:
    """7.5e9 -> '7.50e9' (params, FLOPs)."""
    if n == 0:
        return "0"
    exp = math.floor(math.log10(abs(n)))
    return f"{n / 10**exp:.2f}e{exp}" if abs(exp) >= 4 else _sig(n)


def fmt_rate(tok_s: float | None) -> str:
    return "—" if tok_s is None else f"{_sig(tok_s)} tok/s"


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{_sig(seconds)} s"
    if seconds >= 1e-3:
        return f"{_sig(seconds * 1e3)} ms"
    return f"{_sig(seconds * 1e6)} µs"


def fmt_bandwidth(b: float) -> str:
    return f"{_sig(b / 1e12)} TB/s" if b >= 1e12 else f"{_sig(b / 1e9)} GB/s"


def fmt_flops(f: float | None) -> str:
    return "—" if f is None else f"{_sig(f / 1e12, 4)} TFLOP/s"


def size_label(r: PlanResult) -> str:
    return f"{r.model.params_total / 1e9:.3g}B"


def where(r: PlanResult) -> str:
    hw = r.hardware
    if hw.kind == "cpu":
        return "this machine" if hw.measured else f"one {hw.name}"
    unit = "chip" if hw.kind == "sram" else hw.kind.upper()
    return f"this {unit}" if r.devices == 1 else f"{r.devices} × {hw.name}"


# ---------------------------------------------------------------------------------------------
# Summary


def summary_lines(r: PlanResult) -> list[str]:
    m, hw = r.memory, r.hardware
    lines = [
        f"{r.model.name} ({r.model.describe()}) on {r.devices} × {hw.name} ({hw.memory_label or fmt_memory(hw)}, "
        f"{fmt_bandwidth(hw.bandwidth_bytes_per_s)})",
        f"  {r.precision.name} weights, {r.kv_dtype} KV, context {r.context:,} × {r.concurrency} sequence(s)",
        f"memory    {_need_text(r)} per device of {fmt_bytes(m.usable_per_device)} usable: {_verdict(r)}",
        f"devices   {_devices_text(r)}",
        f"capacity  max concurrency at {r.context:,} tokens: {_opt(r.max_concurrency)}; "
        f"max context at {r.concurrency} sequence(s): {_opt(r.max_context)}",
        f"decode    ≤ {fmt_rate(r.decode_tokens_per_s_bound)} per stream, ≤ {fmt_rate(r.aggregate_tokens_per_s_bound)} "
        f"aggregate ({r.decode.bound_by}-bound, {fmt_time(r.decode.seconds)} per step: {_terms_text(r.decode)})",
        f"TTFT      ≥ {r.ttft_ms_bound:,.1f} ms for one {r.input_tokens:,}-token prompt ({r.prefill.bound_by}-bound)",
    ]
    if r.layout is not None and r.layout.kind != "single":
        lines.insert(4, f"layout    {_layout_text(r)}")
    lines.append(f"energy    {_energy_text(r)}")
    return lines + [f"note      {n}" for n in r.notes]


def _terms_text(s: StepBound) -> str:
    compute = fmt_time(s.compute_s) if s.compute_s is not None else "no figure"
    return f"memory {fmt_time(s.memory_s)}, compute {compute}, communication {fmt_time(s.comm_s)}"


def _layout_text(r: PlanResult) -> str:
    lay = r.layout
    if lay is None:
        return "one device"
    text = lay.describe()
    if lay.link is not None and lay.group > 1:
        text += f"; inside a group: {lay.link.label}"
    if lay.stage_link is not None and lay.stages > 1 and lay.stage_link != lay.link:
        text += f"; between stages: {lay.stage_link.label}"
    if r.hardware.kind == "sram":
        text += " (an assumption: the real layout is the compiler's)"
    return text


def _energy_text(r: PlanResult) -> str:
    hw = r.hardware
    if not hw.tdp_w:
        return f"no TDP in the catalog for {hw.name}: tokens per joule not stated"
    return (f"{fmt_rate(r.aggregate_tokens_per_s_bound)} ÷ ({r.devices} × {hw.tdp_w:g} W TDP) = "
            f"{r.tokens_per_joule_bound:.3g} tok/J at the bound, every device at TDP")  # fmt: skip


def _opt(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _need_text(r: PlanResult) -> str:
    m = r.memory
    return (f"weights {fmt_bytes(m.weights_per_device)} + KV {fmt_bytes(m.kv_per_device)} + overhead "
            f"{fmt_bytes(m.overhead.total)} = {fmt_bytes(m.need_per_device)}")  # fmt: skip


def _verdict(r: PlanResult) -> str:
    m = r.memory
    if not m.fits:
        return "does NOT fit"
    if r.hardware.kind == "sram":
        return "fits (the chip count is chosen to hold everything)"
    if m.comfortable:
        return f"fits, comfortable (memory ≥ {1 + COMFORTABLE_HEADROOM:.1f} × weights)"
    return f"fits, but tight (memory < {1 + COMFORTABLE_HEADROOM:.1f} × weights; the guides keep 30–50 % headroom)"


def _devices_text(r: PlanResult) -> str:
    unit = "chips" if r.hardware.kind == "sram" else "devices"
    fewest = (
        f"minimum {r.min_devices} {unit[:-1] if r.min_devices == 1 else unit}"
        if r.min_devices
        else f"no count of {unit} fits"
    )
    if r.min_devices and r.tp_sizes is not None:
        fewest += " (the smallest valid tensor-parallel size that fits)"
    one = "fits on one" if r.fits_on_one_device else "does not fit on one"
    text = f"{one}; {fewest}"
    if r.tp_sizes is not None:
        text += f"; valid tensor-parallel sizes {', '.join(map(str, r.tp_sizes))}"
    return text


# ---------------------------------------------------------------------------------------------
# Notes


def plan_notes(r: PlanResult) -> list[str]:
    notes = list(r.model.notes)
    hw, model = r.hardware, r.model
    if hw.note:
        notes.append(hw.note)
    if model.max_context and r.context > model.max_context:
        notes.append(f"context {r.context:,} exceeds the model's {model.max_context:,}-token limit")
    if r.tp_sizes is not None and r.devices not in r.tp_sizes:
        notes.append(
            f"{r.devices} is not a valid tensor-parallel size for this model: pipeline parallelism would be needed"
        )
    lay = r.layout
    if hw.kind != "sram" and lay is not None and lay.stages > 1:
        notes.append(
            f"{r.devices} devices span more than one {hw.devices_per_node}-device node: planned as {lay.describe()}; "
            "a token reads its weights one stage at a time"
        )
    if r.devices_basis == "none fits":
        notes.append("no device count fits: the bounds are for one device")
    if hw.kind == "sram" and lay is not None:
        notes.append(
            f"SRAM chips: the layout ({lay.group} chip(s) per layer, {lay.stages} stage(s)) is the plan's assumption; "
            "the real one is the compiler's. A token visits the stages in turn, so only one layer's chips read "
            "for it at a time"
        )
    if r.decode.comm is not None:
        unknown = sorted({t.link.name for t in r.decode.comm.trips if t.link.latency_s is None})
        if unknown:
            notes.append(
                f"no published per-hop latency for {', '.join(unknown)}: counted as 0, which only raises the bound"
            )
    if hw.kind == "cpu" and hw.measured:
        notes.extend(_cache_note(r))
    if r.decode.compute and r.decode.compute_dtype != r.precision.compute_dtype:
        notes.append(
            f"{hw.name} lists no {r.precision.compute_dtype} figure: compute at its {r.decode.compute_dtype} rate"
        )
    if model.gguf and r.precision.name != model.gguf.precision:
        notes.append(f"weights counted at {r.precision.name}, not the file's own {model.gguf.file_type}")
    return notes


def _cache_note(r: PlanResult) -> list[str]:
    llc = probe.last_level_cache_bytes()
    if llc and r.decode.bytes < llc:
        return [f"{fmt_bytes(r.decode.bytes)} per step fits in the {fmt_bytes(llc)} last-level cache: decode may run from cache, "
                "faster than this DRAM bound"]  # fmt: skip
    return []


# ---------------------------------------------------------------------------------------------
# Refusal and acceptance messages (check_fit)


def fits_message(r: PlanResult) -> str:
    m = r.memory
    return (f"{r.model.name} ({size_label(r)}) in {r.precision.name} fits on {where(r)}: {_need_text(r)} per device, "
            f"within {fmt_bytes(m.usable_per_device)} usable")  # fmt: skip


def weights_refusal(r: PlanResult) -> str:
    m, hw = r.memory, r.hardware
    has = fmt_memory(hw) if r.devices == 1 else f"{r.devices} × {fmt_memory(hw)}"
    verb = "has" if r.devices == 1 else "have"
    return (f"{r.model.name} ({size_label(r)}) in {r.precision.name} needs ~{fmt_bytes(m.weights)} of weights, but "
            f"{where(r)} {verb} {has} ({fmt_bytes(m.usable_per_device)} usable per device at {m.utilization:g})")  # fmt: skip


def kv_refusal(r: PlanResult) -> str:
    m = r.memory
    return (f"{r.model.name} in {r.precision.name}: the weights fit on {where(r)}, but {r.concurrency} × {r.context:,}-token "
            f"sequences need {fmt_bytes(m.kv_per_device)} of KV cache per device and only "
            f"{fmt_bytes(max(m.free_for_kv, 0))} is left")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# --explain


def explain_lines(r: PlanResult) -> list[str]:
    return [*_weights_lines(r), *_kv_lines(r), *_memory_lines(r), *_decode_lines(r), *_prefill_lines(r)]


def _weights_lines(r: PlanResult) -> list[str]:
    model, prec, m = r.model, r.precision, r.memory
    if model.gguf and prec.name == model.gguf.precision:
        g = model.gguf
        types = ", ".join(f"{n} × {t}" for t, n in g.tensor_types)
        return [
            f"weights       = the file's tensor bytes ({g.file_type}: {types}) = {fmt_bytes(m.weights)} (file {fmt_bytes(g.file_bytes)})"
        ]
    p = model.params
    layer, emb = p.dense + p.experts, p.embedding + p.lm_head
    return [
        f"weights       = layer params × bits ÷ 8 + embedding/LM-head params × bits ÷ 8 = {fmt_sci(layer)} × {prec.bits_per_weight:.4g} ÷ 8"
        f" + {fmt_sci(emb)} × {prec.embedding_bits:.4g} ÷ 8 = {fmt_bytes(m.weights)}   [{prec.name}: {prec.note}]",
    ]


def _kv_term_text(t: KVTerm, kv_bytes: float) -> str:
    g = t.group
    tensors = "1 (K=V)" if g.k_eq_v else "2"
    heads = f"{t.heads:g}"
    return f"{g.layers} {g.kind} layers × {tensors} × {heads} KV heads × {g.head_dim} × {kv_bytes:g} B"


def _kv_lines(r: PlanResult) -> list[str]:
    n, kvb = r.devices, r.kv_bytes_per_element
    whole = kv_terms(r.model, r.context, kvb)
    per_dev = kv_terms(r.model, r.context, kvb, n, r.hardware)
    lines = [f"KV per token  = Σ layers × tensors × KV heads × head_dim × bytes = "
             f"{' + '.join(_kv_term_text(t, kvb) for t in whole)} = {fmt_bytes(r.kv_bytes_per_token)}"]  # fmt: skip
    seq = " + ".join(
        f"{fmt_bytes(t.bytes_per_token)} × {t.tokens:,}" + (f" (window {t.group.window:,})" if t.group.window else "")
        for t in whole
    )
    lines.append(
        f"KV/sequence   = per-token bytes × tokens cached (sliding layers stop at the window) = {seq} = "
        f"{fmt_bytes(r.kv_bytes_per_sequence)}"
    )
    if n > 1:
        heads = ", ".join(f"{t.heads:g} of {t.group.kv_heads}" for t in per_dev)
        lines.append(f"KV per device = with {n} devices each holds KV heads {heads} (max(1, kv_heads ÷ {n})) = "
                     f"{fmt_bytes(r.memory.kv_per_sequence_per_device)} per sequence")  # fmt: skip
    lines.append(f"KV total      = {r.concurrency} sequence(s) × {fmt_bytes(r.memory.kv_per_sequence_per_device)} = "
                 f"{fmt_bytes(r.memory.kv_per_device)} per device")  # fmt: skip
    return lines


def _overhead_text(r: PlanResult) -> str:
    o, model = r.memory.overhead, r.model
    if r.hardware.kind == "sram":
        return "overhead      = 0 (a compiled, static schedule on SRAM chips: no runtime reserve is modelled)"
    return (
        f"overhead      = runtime {fmt_bytes(o.runtime)} + activations {o.chunk_tokens:,} tokens × (4 × {model.hidden_size:,} + 3 × "
        f"{o.ffn_per_device:,.0f}) × 2 B = {fmt_bytes(o.activations)} + logits {r.concurrency} × {model.vocab_size:,} × 4 B = "
        f"{fmt_bytes(o.logits)} → {fmt_bytes(o.total)} per device"
    )


def _memory_lines(r: PlanResult) -> list[str]:
    m, o = r.memory, r.memory.overhead
    lines = [
        _overhead_text(r),
        f"need          = weights {fmt_bytes(m.weights_per_device)} + KV {fmt_bytes(m.kv_per_device)} + overhead {fmt_bytes(o.total)} = "
        f"{fmt_bytes(m.need_per_device)} per device vs usable {m.utilization:g} × {fmt_bytes(m.memory_per_device)} = "
        f"{fmt_bytes(m.usable_per_device)} → {_verdict(r)}",
    ]
    if r.hardware.kind == "sram":
        lines.append(f"chips         = ⌈(weights + KV) ÷ usable per chip⌉ = "
                     f"⌈({fmt_bytes(m.weights)} + {fmt_bytes(m.kv_per_device * r.devices)}) ÷ "
                     f"{fmt_bytes(m.usable_per_device)}⌉ = {r.min_devices}")  # fmt: skip
    elif r.tp_sizes is not None:
        kv = "/".join(map(str, r.model.kv_head_counts()))
        lines.append(f"devices       = smallest valid tensor-parallel size that fits = {_opt(r.min_devices)} "
                     f"(valid: {r.model.num_heads} heads "
                     f"divisible by tp, and KV heads {kv} divisible by tp or tp by them: {', '.join(map(str, r.tp_sizes))})")  # fmt: skip
    if r.max_concurrency is not None:
        per = m.kv_per_sequence_per_device + o.logits_per_sequence
        lines.append(f"max conc.     = ⌊(usable − weights − runtime − activations) ÷ (KV + logits per sequence)⌋ = "
                     f"⌊{fmt_bytes(m.free_for_kv)} ÷ "
                     f"{fmt_bytes(per)}⌋ = {r.max_concurrency:,}")  # fmt: skip
    return lines


def _step_bytes_text(r: PlanResult, s: StepBound, verb: str) -> str:
    w, model = r.model.weight_bytes(r.precision), r.model
    head = w.embedding if model.tie_embeddings else w.lm_head
    parts = [
        f"dense {fmt_bytes(w.dense)}",
        f"LM head{' (tied embedding)' if model.tie_embeddings else ''} {fmt_bytes(head)}",
    ]
    if model.moe and s.expert_fraction is not None:
        moe = model.moe
        parts.append(f"experts {fmt_bytes(w.experts)} × {s.expert_fraction:.0%} (distinct experts {s.tokens:,} tokens hit: "
                     f"1 − (1 − {moe.active}/{moe.experts})^{s.tokens:,})")  # fmt: skip
    per = f" ÷ {s.group} devices" if s.group > 1 else ""
    return f"weights ({' + '.join(parts)}){per} = {fmt_bytes(s.weight_bytes)} + KV {verb} {fmt_bytes(s.kv_bytes)}"


def _decode_lines(r: PlanResult) -> list[str]:
    s, model = r.decode, r.model
    attn = sum(g.layers * 4 * g.q_heads * g.head_dim * attended_tokens(g, r.context) for g in model.attention)
    flops_text = (f"{s.tokens} × (2 × ({fmt_sci(layer_params_active(model))} + {fmt_sci(lm_head_params(model))}) + attention "
                  f"{fmt_sci(attn)})" + (f" ÷ {s.group}" if s.group > 1 else ""))  # fmt: skip
    return [
        f"decode step   = max(bytes ÷ bandwidth, FLOPs ÷ compute) + communication, at batch {s.tokens}, each sequence "
        f"holding {r.context:,} tokens",
        *_layout_lines(r),
        f"  bytes       = {_step_bytes_text(r, s, 'read')} = {fmt_bytes(s.bytes)} ÷ {fmt_bandwidth(s.bandwidth)} = {fmt_time(s.memory_s)}",
        f"  FLOPs       = {flops_text} = {fmt_sci(s.flops)} ÷ {_compute_text(s)} = {fmt_time(s.compute_s)}",
        *_comm_lines(r),
        f"  step        = max({fmt_time(s.memory_s)}, {fmt_time(s.compute_s or 0.0)}) + {fmt_time(s.comm_s)} = "
        f"{fmt_time(s.seconds)} ({s.bound_by} is the largest term)",
        f"  per stream  ≤ 1 ÷ {fmt_time(s.seconds)} = {fmt_rate(r.decode_tokens_per_s_bound)} ({s.bound_by}-bound); "
        f"aggregate ≤ {r.concurrency} × that = {fmt_rate(r.aggregate_tokens_per_s_bound)}",
        f"  energy      = {_energy_text(r)}",
    ]


def _layout_lines(r: PlanResult) -> list[str]:
    lay = r.layout
    if lay is None or lay.kind == "single":
        return []
    lines = [f"  layout      = {_layout_text(r)}"]
    if lay.kind == "sram":
        lines.append(f"                chips per layer = ⌈{lay.devices} chips ÷ {lay.layers} layers⌉ = {lay.group}; stages = "
                     f"⌈{lay.devices} ÷ {lay.group}⌉ = {lay.stages}; the bytes and FLOPs below are one chip's share of "
                     f"the whole model over {lay.group} chip(s), read as the token passes")  # fmt: skip
    elif lay.stages > 1:
        lines.append(f"                the bytes and FLOPs below are over the {lay.group} devices of one stage: the "
                     f"{lay.stages} stages work on a token in turn")  # fmt: skip
    return lines


def _trip_text(t: Trip) -> str:
    link = t.link
    if link.latency_s is None:
        latency = f"{t.hops} hop(s) × latency not published, taken as 0"
    else:
        latency = f"{t.hops} hop(s) × {fmt_time(link.hop_latency_s)}"
    per = "per port" if link.topology == "switch" else "per link"
    what = f"{t.what} ({t.algorithm}, {t.group} devices)" if t.what == "all-reduce" else t.what
    return (f"{t.count} × {what} × ({latency} + {fmt_bytes(t.bytes_on_link)} ÷ "
            f"{fmt_bandwidth(link.bandwidth_bytes_per_s)} {per}) over {link.label} = {fmt_time(t.seconds)}")  # fmt: skip


def _comm_lines(r: PlanResult) -> list[str]:
    comm = r.decode.comm
    if comm is None:
        return ["  comm.       = 0 (one device: nothing crosses a link)"]
    lines = [f"  comm.       = the hidden state, {r.decode.tokens} × {r.model.hidden_size:,} × {ACTIVATION_BYTES} B = "
             f"{fmt_bytes(comm.message_bytes)}, on every trip of the token's path (two all-reduces per layer under "
             f"tensor parallelism, one hop per stage boundary)"]  # fmt: skip
    lines += [f"                {_trip_text(t)}" for t in comm.trips]
    lines.append(f"                = latency {fmt_time(comm.latency_s)} + transfer {fmt_time(comm.transfer_s)} = "
                 f"{fmt_time(comm.seconds)}")  # fmt: skip
    return lines + _other_links(r)


def _other_links(r: PlanResult) -> list[str]:
    """The same all-reduces over the device's other node links: why the link choice moves the bound."""
    lay, comm = r.layout, r.decode.comm
    if lay is None or lay.link is None or comm is None or lay.group < 2:
        return []
    reduce = next((t for t in comm.trips if t.what == "all-reduce"), None)
    if reduce is None:
        return []
    lines = []
    for other in r.hardware.links:
        if other == lay.link or other.scope != "node" or (other.max_group is not None and lay.group > other.max_group):
            continue
        alt = all_reduce(other, lay.group, comm.message_bytes, reduce.count)
        step = r.decode.seconds - reduce.seconds + alt.seconds
        lines.append(f"  other link  = over {other.label} ({fmt_time(other.hop_latency_s)} per hop, "
                     f"{fmt_bandwidth(other.bandwidth_bytes_per_s)} each way) the all-reduces take {fmt_time(alt.seconds)} "
                     f"instead of {fmt_time(reduce.seconds)}: {fmt_rate(1 / step)} per stream")  # fmt: skip
    return lines


def _compute_text(s: StepBound) -> str:
    return f"{fmt_flops(s.compute)} ({s.compute_dtype})" if s.compute else "no compute figure (not a bound)"


def _prefill_lines(r: PlanResult) -> list[str]:
    s, model, n = r.prefill, r.model, r.input_tokens
    attn = f"attention Σ 4 × heads × head_dim × causal pairs of {n:,} tokens"
    return [
        f"TTFT          = max(FLOPs ÷ compute, bytes ÷ bandwidth) for one {n:,}-token prompt",
        f"  FLOPs       = 2 × {fmt_sci(layer_params_active(model))} × {n:,} + 2 × {fmt_sci(lm_head_params(model))} "
        f"(last token's logits) + {attn}"
        + (f", ÷ {r.devices}" if r.devices > 1 else "")
        + f" = {fmt_sci(s.flops)} ÷ {_compute_text(s)} = {fmt_time(s.compute_s)}",
        f"  bytes       = {_step_bytes_text(r, s, 'written')} = {fmt_bytes(s.bytes)} ÷ {fmt_bandwidth(s.bandwidth)} = "
        f"{fmt_time(s.memory_s)}",
        f"  TTFT        ≥ {r.ttft_ms_bound:,.2f} ms ({s.bound_by}-bound; queueing, tokenization and the network come on top)",
    ]
