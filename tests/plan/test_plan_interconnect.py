"""Communication on the token's path, layouts, TDP, and the published points beside the bound."""

from __future__ import annotations

import math

import pytest

from tokenrace.errors import UsageError
from tokenrace.plan import load_hardware, plan
from tokenrace.plan.catalog import hardware_rows, link_rows, load_link
from tokenrace.plan.interconnect import all_reduce
from tokenrace.plan.published import check_point, nearest_published, published_points


def test_every_link_and_tdp_cites_its_source() -> None:
    for name, row in link_rows().items():
        assert row.source, name
        assert row.gb_s > 0 and row.topology in {"switch", "direct"}, name
    for device in hardware_rows():
        for link in device.links:
            assert link in link_rows(), (device.name, link)
        if device.tdp_w:
            assert device.tdp_source, device.name
    groq = load_hardware("groq")
    c2c = groq.link()
    assert c2c is not None and (c2c.count, c2c.bandwidth_bytes_per_s, c2c.topology) == (16, 14e9, "direct")
    assert "Linley" in c2c.source and "ISCA 2022" in c2c.source
    assert groq.tdp_w == 300


def test_all_reduce_hand_worked() -> None:
    """Two GPUs, 16 kB of hidden state: one hop of 0.6 µs plus 16,384 B at 450 GB/s (NVLink 4, each way)."""
    nvlink = load_link("nvlink4")
    trip = all_reduce(nvlink, 2, 16_384, count=160)
    assert trip.algorithm == "one-shot" and trip.hops == 1
    assert trip.seconds == pytest.approx(160 * (0.6e-6 + 16_384 / 450e9))
    # Eight GPUs through a switch: a one-shot sends 7 messages through one port; a ring takes 14 hops.
    eight = all_reduce(nvlink, 8, 16_384, count=1)
    one_shot = 0.6e-6 + 7 * 16_384 / 450e9
    ring = 14 * 0.6e-6 + 2 * 7 / 8 * 16_384 / 450e9
    assert eight.seconds == pytest.approx(min(one_shot, ring))
    # Groq: direct links, one per peer; latency unpublished, so only the bytes count.
    c2c = load_link("groq-c2c")
    groq = all_reduce(c2c, 5, 16_384, count=1)
    assert groq.seconds == pytest.approx(16_384 / 14e9)
    # More peers than links: only the ring is possible.
    assert all_reduce(c2c, 20, 16_384, count=1).algorithm == "ring"


def test_two_h100_over_pcie_are_slower_than_over_nvlink_and_the_explanation_says_why() -> None:
    nvlink = plan("llama-3.3-70b", "H100-SXM", devices=2, precision="fp8", context=5250)
    pcie = plan("llama-3.3-70b", "H100-SXM", devices=2, precision="fp8", context=5250, link="pcie5-x16")
    assert nvlink.decode.memory_s == pcie.decode.memory_s
    assert pcie.decode_tokens_per_s_bound < nvlink.decode_tokens_per_s_bound
    assert pcie.decode.comm_s > nvlink.decode.comm_s
    # 160 all-reduces (2 per layer × 80 layers) of 2 × 8192 bytes each.
    (trip,) = pcie.decode.comm.trips
    assert (trip.count, trip.group) == (160, 2)
    assert pcie.decode.comm_s == pytest.approx(160 * (1.0e-6 + 16_384 / 63e9))
    text = "\n".join(pcie.explain())
    assert (
        "160 × all-reduce (one-shot, 2 devices) × (1 hop(s) × 1.00 µs + 16.4 kB ÷ 63.0 GB/s per port) over PCIe 5.0 x16"
        in text
    )
    assert "step        = max(" in text
    # Why: the same all-reduces over NVLink, and the speed they would allow.
    why = next(line for line in pcie.explain() if line.lstrip().startswith("other link") and "NVLink 4 through" in line)
    assert "0.600 µs per hop" in why and f"{nvlink.decode_tokens_per_s_bound:.1f} tok/s" in why


def test_a_single_device_has_no_communication() -> None:
    r = plan("llama-3.1-8b", "H100-SXM", devices=1)
    assert r.decode.comm is None and r.decode.comm_s == 0
    assert r.layout is not None and r.layout.kind == "single"


def test_groq_layout_is_stated_and_communication_binds() -> None:
    r = plan("llama-3.3-70b", "groq", precision="int8", context=4096)
    lay = r.layout
    assert lay is not None and lay.kind == "sram"
    assert lay.group == math.ceil(r.devices / 80) and lay.stages == math.ceil(r.devices / lay.group)
    assert r.decode.bound_by == "communication"
    trips = {t.what: t for t in r.decode.comm.trips}
    assert trips["all-reduce"].count == 160 and trips["stage hop"].count == lay.stages - 1
    summary = "\n".join(r.summary())
    assert "chip(s) per layer" in summary and "the real layout is the compiler's" in summary
    assert any("groq-c2c" in n and "counted as 0" in n for n in r.notes)


def test_multi_node_gpus_are_tensor_parallel_inside_a_node_and_pipelined_across() -> None:
    r = plan("llama-3.1-70b", "H100-SXM", devices=16)
    lay = r.layout
    assert lay is not None and (lay.group, lay.stages) == (8, 2)
    assert lay.stage_link is not None and lay.stage_link.name == "ib-ndr"
    # Each stage reads its share in turn: the token's bytes are read at 8 GPUs' bandwidth, not 16.
    eight = plan("llama-3.1-70b", "H100-SXM", devices=8)
    assert r.decode.weight_bytes == pytest.approx(eight.decode.weight_bytes)
    assert any("pipeline" in n for n in r.notes)


def test_link_choice_errors_name_the_flag() -> None:
    with pytest.raises(UsageError, match="no 'infiniband-xdr' link"):
        plan("llama-3.1-8b", "H100-SXM", devices=2, link="infiniband-xdr")
    with pytest.raises(UsageError, match="joins at most 2 devices"):
        plan("llama-3.1-70b", "H100-PCIe", devices=4, link="nvlink4-bridge")


def test_tokens_per_joule_at_tdp() -> None:
    r = plan("llama-3.1-70b", "H100-SXM", devices=2, precision="fp8", concurrency=4, context=2048)
    assert r.power_w == 2 * 700
    assert r.tokens_per_joule_bound == pytest.approx(r.aggregate_tokens_per_s_bound / 1400)
    assert plan("llama-3.1-8b", "TPU-v5e", devices=2).tokens_per_joule_bound is None  # no TDP published
    d = r.to_dict()
    assert d["tdp_w_per_device"] == 700 and d["decode_tokens_per_joule_at_tdp"] == r.tokens_per_joule_bound


# ---------------------------------------------------------------------------------------------
# The published points


def test_no_bound_is_below_a_published_point_and_none_is_far_below_its_bound() -> None:
    points = published_points()
    assert len(points) >= 15
    for p in points:
        assert p.source and p.source_kind in {"primary", "secondary"}, p.id
        c = check_point(p)
        assert p.tok_s <= c.compared_bound, f"{p.id}: {p.tok_s} > bound {c.compared_bound:.1f}"
        if not p.speculative and p.low_share_reason is None:
            assert c.share_pct >= 1.0, f"{p.id}: {c.share_pct:.2f} % of its bound, with no stated reason"


def test_gpu_points_sit_at_a_credible_share_of_the_bound() -> None:
    for p in published_points():
        c = check_point(p)
        if c.plan.hardware.kind == "gpu":
            assert 40 <= c.share_pct <= 95, f"{p.id}: {c.share_pct:.1f} %"


@pytest.mark.parametrize("model", ["llama-3.3-70b", "llama-3.1-8b"])
def test_groq_bounds_hold_every_groq_point_within_30_times_the_best(model: str) -> None:
    groq = [check_point(p) for p in published_points() if p.hardware == "Groq-LPU"]
    mine = [c for c in groq if c.plan.model.name == plan(model, "groq").model.name]
    assert mine
    for c in mine:
        r = plan(model, "groq", precision=c.point.precision, context=c.point.context)
        assert c.point.tok_s <= r.decode_tokens_per_s_bound * (c.point.tokens_per_step or 1)
    best = max(c.point.tok_s for c in mine if not c.point.speculative)
    for c in mine:
        assert c.bound <= 30 * best, f"{c.point.id}: bound {c.bound:.0f} > 30 × {best}"
    # What `tokenrace plan --model M --hardware Groq-LPU` prints (the model's own bf16) holds the same.
    default = plan(model, "groq").decode_tokens_per_s_bound
    assert max(c.point.tok_s for c in mine) <= default <= 30 * best


def test_speculative_points_are_compared_with_the_bound_times_tokens_per_step() -> None:
    spec = next(p for p in published_points() if p.speculative)
    c = check_point(spec)
    assert c.compared_bound == c.bound * (spec.tokens_per_step or 1)
    assert "speculative decoding" in c.comparison_text()


def test_nearest_published_point() -> None:
    near = nearest_published("llama-3.3-70b", "H100-SXM", 2)
    assert near is not None and near.point.id.startswith("nim-llama-3.3-70b-fp8-2xh100")
    groq = nearest_published("llama-3.1-70b", "Groq-LPU")
    assert groq is not None and groq.point.hardware == "Groq-LPU" and not groq.point.speculative
    other = nearest_published("llama-3.1-8b", "L4")  # no L4 row: the same model on another device
    assert other is not None and other.point.model == "llama-3.1-8b"
    assert nearest_published("gemma-3-27b", "H100-SXM") is None
