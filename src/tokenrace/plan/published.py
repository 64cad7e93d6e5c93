"""Published decode speeds beside the bound (published.json): every row planned as its source states it.

`check_point(point)` plans the row's configuration and gives its share of the bound; speculative rows
are compared with the bound × tokens per step. `nearest_published(model, hardware)` finds the row
closest to a plan (same model and device, then same model) for `tokenrace plan` and for a report
that shows a measured run beside what others published.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TypedDict

from tokenrace.plan.catalog import (
    Hardware,
    PublishedRow,
    UnboundedRow,
    load_hardware,
    load_model,
    published_rows,
    unbounded_rows,
)
from tokenrace.plan.explain import fmt_rate
from tokenrace.plan.modelspec import ModelSpec
from tokenrace.plan.planner import PlanResult, plan


@dataclass(frozen=True)
class PublishedPoint:
    id: str
    label: str
    model: str  # catalog name
    hardware: str  # catalog name
    devices: int | None  # None: the fewest that fit
    precision: str
    context: int
    input_tokens: int | None
    concurrency: int
    tok_s: float  # per stream, while decoding
    figure: str
    speculative: bool
    tokens_per_step: float | None
    source_kind: str  # primary | secondary
    source: str
    low_share_reason: str | None = None
    kv_dtype: str = "fp16"


class PointJson(TypedDict):
    """A published point beside its bound, as `plan --json` and `plan --list --json` write it."""

    id: str
    label: str
    model: str
    hardware: str
    devices: int
    precision: str
    context_tokens: int
    concurrency: int
    published_tokens_per_s: float
    figure: str
    speculative: bool
    tokens_per_step: float | None
    decode_tokens_per_s_bound: float
    compared_bound: float
    pct_of_bound: float
    decode_bound_by: str
    tokens_per_joule_at_tdp: float | None
    source_kind: str
    source: str
    low_share_reason: str | None


@dataclass(frozen=True)
class PointCheck:
    """A published point against the bound of its own configuration."""

    point: PublishedPoint
    plan: PlanResult

    @property
    def bound(self) -> float:
        return self.plan.decode_tokens_per_s_bound

    @property
    def compared_bound(self) -> float:
        """The bound × tokens per step for speculative decoding (× 1 where that is not published)."""
        return self.bound * (self.point.tokens_per_step or 1.0)

    @property
    def share_pct(self) -> float:
        return 100.0 * self.point.tok_s / self.compared_bound

    @property
    def tokens_per_joule(self) -> float | None:
        """The published speed ÷ the power of its devices at TDP (per stream × streams)."""
        power = self.plan.power_w
        return self.point.tok_s * self.plan.concurrency / power if power else None

    def comparison_text(self) -> str:
        p = self.point
        if not p.speculative:
            return f"{self.share_pct:.1f} % of its bound {fmt_rate(self.bound)}"
        if p.tokens_per_step:
            return (f"{self.share_pct:.1f} % of its bound × {p.tokens_per_step:g} tokens per step = "
                    f"{fmt_rate(self.compared_bound)} (speculative decoding)")  # fmt: skip
        return (f"{self.share_pct:.1f} % of its plain bound {fmt_rate(self.bound)} (speculative decoding; tokens per "
                "step not published, so the share is an upper estimate)")  # fmt: skip

    def line(self) -> str:
        r = self.plan
        return (f"{self.point.label}: {fmt_rate(self.point.tok_s)} per user on {r.devices} × {r.hardware.name} "
                f"({r.precision.name}) = {self.comparison_text()} [{self.point.source_kind}: {self.point.source}]")  # fmt: skip

    def to_dict(self) -> PointJson:
        p, r = self.point, self.plan
        return {
            "id": p.id,
            "label": p.label,
            "model": r.model.name,
            "hardware": r.hardware.name,
            "devices": r.devices,
            "precision": r.precision.name,
            "context_tokens": r.context,
            "concurrency": r.concurrency,
            "published_tokens_per_s": p.tok_s,
            "figure": p.figure,
            "speculative": p.speculative,
            "tokens_per_step": p.tokens_per_step,
            "decode_tokens_per_s_bound": self.bound,
            "compared_bound": self.compared_bound,
            "pct_of_bound": self.share_pct,
            "decode_bound_by": r.decode.bound_by,
            "tokens_per_joule_at_tdp": self.tokens_per_joule,
            "source_kind": p.source_kind,
            "source": p.source,
            "low_share_reason": p.low_share_reason,
        }


def _point(row: PublishedRow) -> PublishedPoint:
    return PublishedPoint(
        id=row.id,
        label=row.label,
        model=row.model,
        hardware=row.hardware,
        devices=row.devices,
        precision=row.precision,
        context=row.context,
        input_tokens=row.input_tokens,
        concurrency=row.concurrency,
        tok_s=row.tok_s,
        figure=row.figure,
        speculative=row.speculative,
        tokens_per_step=row.tokens_per_step,
        source_kind=row.source_kind,
        source=row.source,
        low_share_reason=row.low_share_reason,
        kv_dtype=row.kv_dtype,
    )


@functools.cache
def published_points() -> tuple[PublishedPoint, ...]:
    return tuple(_point(row) for row in published_rows())


@functools.cache
def check_point(point: PublishedPoint) -> PointCheck:
    r = plan(point.model, point.hardware, devices=point.devices, precision=point.precision, kv_dtype=point.kv_dtype,
             context=point.context, concurrency=point.concurrency, input_tokens=point.input_tokens)  # fmt: skip
    return PointCheck(point, r)


def nearest_published(
    model: ModelSpec | str, hardware: Hardware | str, devices: int | None = None
) -> PointCheck | None:
    """The published point closest to a plan: the same model on the same device (the nearest device
    count, non-speculative first), else the same model on any device; None when the table has neither."""
    spec = load_model(model) if isinstance(model, str) else model
    hw_name = (load_hardware(hardware) if isinstance(hardware, str) else hardware).name
    same_model = [p for p in published_points() if load_model(p.model).name == spec.name]
    same_device = [p for p in same_model if p.hardware == hw_name]
    pool = same_device or same_model
    if not pool:
        return None

    def distance(p: PublishedPoint) -> tuple[int, int, int]:
        count = p.devices if p.devices is not None else check_point(p).plan.devices
        return (0 if p.hardware == hw_name else 1, abs(count - devices) if devices else 0, int(p.speculative))

    return check_point(min(pool, key=distance))


def published_unbounded(model: ModelSpec | str | None = None) -> list[UnboundedRow]:
    """Speeds published on hardware the planner cannot bound (every one, or those of `model`)."""
    if model is None:
        return unbounded_rows()
    spec = load_model(model) if isinstance(model, str) else model
    return [r for r in unbounded_rows() if load_model(r.model).name == spec.name]


def unbounded_line(row: UnboundedRow) -> str:
    return (f"{row.label}: {fmt_rate(row.tok_s)} per user on {row.hardware} ({row.precision}): no bound, since "
            f"{row.no_bound} [{row.source_kind}: {row.source}]")  # fmt: skip


__all__ = [
    "PointCheck",
    "PublishedPoint",
    "check_point",
    "nearest_published",
    "published_points",
    "published_unbounded",
    "unbounded_line",
]
