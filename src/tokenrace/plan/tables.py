"""The planner's tables over the catalog, declared once as `tokenrace.table` tables: the terminal
shows them (`tokenrace plan --model M`), and Markdown, CSV and HTML render the same rows."""

from __future__ import annotations

from tokenrace.plan.catalog import Hardware
from tokenrace.plan.explain import fmt_bandwidth, fmt_bytes, fmt_memory
from tokenrace.plan.modelspec import ModelSpec
from tokenrace.plan.planner import PlanResult
from tokenrace.table import Cell, Column, Table, Tone, text


def compact(x: float) -> str:
    """A speed in three significant figures, thousands as k and millions as M."""
    if x >= 1e6:
        return f"{x / 1e6:.3g}M"
    if x >= 1e4:
        return f"{x / 1e3:.3g}k"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _devices_cell(r: PlanResult) -> Cell:
    """The fewest devices and the decode bound there; good: one device with room, warn: one, tight."""
    if r.min_devices is None:
        return text(None)
    tone: Tone = "good" if r.min_devices == 1 and r.memory.comfortable else "warn" if r.min_devices == 1 else ""
    return text(f"{r.min_devices}× {compact(r.decode_tokens_per_s_bound)}", tone=tone)


def devices_table(rows: list[tuple[Hardware, list[PlanResult]]]) -> Table:
    """Every device of the catalog, one column per precision: the fewest devices that hold weights,
    KV and overhead, and the decode bound per stream at that count."""
    precisions = [r.precision.name for r in rows[0][1]]
    columns = [Column("device", "left"), Column("memory"), Column("bandwidth"), *(Column(p) for p in precisions)]
    t = Table(None, columns)
    for hw, plans in rows:
        t.add(
            text(hw.name),
            text(fmt_memory(hw)),
            text(fmt_bandwidth(hw.bandwidth_bytes_per_s)),
            *map(_devices_cell, plans),
        )
    return t


def comparison_table(model: ModelSpec, rows: list[tuple[Hardware, PlanResult]]) -> Table:
    """One precision, every device: what it takes and what it can do, in tokens per second and per joule."""
    prec = rows[0][1].precision.name
    left = ("device", "layout", "bound by")
    names = ("device", "devices", "per device", "of usable", "layout", "decode ≤", "bound by", "TDP", "tok/J")
    title = f"{model.name} in {prec}, one stream: devices needed, memory per device, the binding term and energy"
    t = Table(title, [Column(n, "left" if n in left else "right") for n in names])
    for hw, r in rows:
        tdp = text(f"{hw.tdp_w:g} W" if hw.tdp_w else None)
        if r.min_devices is None:
            t.add(text(hw.name), *(text(None),) * 3, text("does not fit"), text(None), text(None), tdp, text(None))
            continue
        m = r.memory
        layout = r.layout.describe() if r.layout and r.layout.kind != "single" else "one device"
        if r.layout and r.layout.kind == "sram":
            layout = f"{r.layout.group} chip(s)/layer, {r.layout.stages} stages"
        tpj = r.tokens_per_joule_bound
        t.add(
            text(hw.name),
            text(str(r.devices)),
            text(fmt_bytes(m.need_per_device)),
            text(f"{100 * m.need_per_device / m.usable_per_device:.0f} %"),
            text(layout),
            text(compact(r.decode_tokens_per_s_bound)),
            text(r.decode.bound_by),
            tdp,
            text(None if tpj is None else f"{tpj:.3g}"),
        )
    return t
