"""One plan: a model on one kind of device, at a context length and a concurrency."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypedDict

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.model.summary import Efficiency, RunWarning, WarningCode
from tokenrace.plan import explain as ex
from tokenrace.plan.catalog import Hardware, load_hardware, load_model
from tokenrace.plan.interconnect import Layout, layout_for
from tokenrace.plan.memory import (
    DEFAULT_UTILIZATION,
    MemoryPlan,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_beyond_windows,
    max_concurrency,
    max_context,
    memory_plan,
    min_devices,
    shards_by_heads,
    valid_tp_sizes,
)
from tokenrace.plan.modelspec import ModelSpec
from tokenrace.plan.precision import PRECISIONS, Precision, get_precision, kv_dtype_bytes
from tokenrace.plan.roofline import StepBound, decode_step, prefill


class LayoutJson(TypedDict):
    kind: str
    devices: int
    group: int
    stages: int
    link: str | None
    stage_link: str | None
    description: str


class TripJson(TypedDict):
    """One kind of collective or hop on a decode step's path."""

    what: str
    algorithm: str
    count: int
    group: int
    hops: int
    bytes_on_link: float
    link: str
    latency_ms: float
    transfer_ms: float


class CommunicationJson(TypedDict):
    message_bytes: float
    latency_ms: float
    transfer_ms: float
    trips: list[TripJson]


class PlanJson(TypedDict):
    """`tokenrace plan --json` for one device: every figure of a `PlanResult`, in its unit."""

    model: str
    model_source: str
    hardware: str
    hardware_kind: str
    hardware_source: str
    devices: int
    devices_basis: str
    precision: str
    bits_per_weight: float
    kv_dtype: str
    context_tokens: int
    concurrency: int
    input_tokens: int
    params: int
    params_active: int
    weights_bytes: int
    weights_bytes_per_device: int
    kv_bytes_per_token: int
    kv_bytes_per_token_beyond_window: int
    kv_bytes_per_sequence: int
    kv_bytes_total: int
    overhead_bytes_per_device: int
    total_bytes: int
    total_bytes_per_device: int
    device_memory_bytes: int
    usable_bytes_per_device: int
    memory_utilization: float
    fits: bool
    fits_on_one_device: bool
    comfortable: bool
    headroom_over_weights_pct: float | None
    min_devices: int | None
    valid_tensor_parallel_sizes: list[int] | None
    max_concurrency: int | None
    max_context_tokens: int | None
    decode_step_ms_bound: float
    decode_tokens_per_s_bound: float
    aggregate_tokens_per_s_bound: float
    decode_bound_by: str
    decode_memory_ms: float
    decode_compute_ms: float | None
    decode_communication_ms: float
    decode_communication: CommunicationJson | None
    layout: LayoutJson | None
    tdp_w_per_device: float | None
    power_w_at_tdp: float | None
    decode_tokens_per_joule_at_tdp: float | None
    decode_bytes_per_step_per_device: int
    decode_flops_per_step_per_device: float
    ttft_ms_bound: float
    prefill_bound_by: str
    bandwidth_bytes_per_s: float
    compute_flops_per_s: float | None
    compute_dtype: str | None
    notes: list[str]


@dataclass(frozen=True)
class PlanResult:
    model: ModelSpec
    hardware: Hardware
    precision: Precision
    kv_dtype: str
    kv_bytes_per_element: float
    context: int
    concurrency: int
    input_tokens: int
    devices: int
    devices_basis: str  # "given", "minimum" or "none fits"
    memory: MemoryPlan
    fits_on_one_device: bool
    min_devices: int | None
    tp_sizes: tuple[int, ...] | None  # None: not a tensor-parallel device (CPU, SRAM chips)
    max_concurrency: int | None
    max_context: int | None
    decode: StepBound
    prefill: StepBound
    notes: tuple[str, ...]
    layout: Layout | None = None

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def weights_bytes(self) -> float:
        return self.memory.weights

    @property
    def kv_bytes_per_token(self) -> float:
        """The whole model's KV bytes per token, every caching layer, before any sharding."""
        return kv_bytes_per_token(self.model, self.kv_bytes_per_element)

    @property
    def kv_bytes_per_sequence(self) -> float:
        return kv_bytes_per_sequence(self.model, self.context, self.kv_bytes_per_element)

    @property
    def total_bytes(self) -> float:
        return self.memory.need_per_device * self.devices

    @property
    def decode_tokens_per_s_bound(self) -> float:
        return 1.0 / self.decode.seconds

    @property
    def aggregate_tokens_per_s_bound(self) -> float:
        return self.concurrency / self.decode.seconds

    @property
    def ttft_ms_bound(self) -> float:
        return self.prefill.seconds * 1000

    @property
    def power_w(self) -> float | None:
        """Every device at its TDP; None when the catalog has no TDP for the device."""
        return self.devices * self.hardware.tdp_w if self.hardware.tdp_w else None

    @property
    def tokens_per_joule_bound(self) -> float | None:
        """The aggregate decode bound ÷ the power of every device at TDP: a reference for tokens per joule,
        not a bound (a device may draw less than its TDP)."""
        power = self.power_w
        return self.aggregate_tokens_per_s_bound / power if power else None

    def to_dict(self) -> PlanJson:
        m, d, p = self.memory, self.decode, self.prefill
        headroom = m.headroom_over_weights
        return {
            "model": self.model.name,
            "model_source": self.model.source,
            "hardware": self.hardware.name,
            "hardware_kind": self.hardware.kind,
            "hardware_source": self.hardware.source,
            "devices": self.devices,
            "devices_basis": self.devices_basis,
            "precision": self.precision.name,
            "bits_per_weight": self.precision.bits_per_weight,
            "kv_dtype": self.kv_dtype,
            "context_tokens": self.context,
            "concurrency": self.concurrency,
            "input_tokens": self.input_tokens,
            "params": self.model.params_total,
            "params_active": round(self.model.params_active),
            "weights_bytes": round(m.weights),
            "weights_bytes_per_device": round(m.weights_per_device),
            "kv_bytes_per_token": round(self.kv_bytes_per_token),
            "kv_bytes_per_token_beyond_window": round(
                kv_bytes_per_token_beyond_windows(self.model, self.kv_bytes_per_element)
            ),
            "kv_bytes_per_sequence": round(self.kv_bytes_per_sequence),
            "kv_bytes_total": round(m.kv_per_device * self.devices),
            "overhead_bytes_per_device": round(m.overhead.total),
            "total_bytes": round(self.total_bytes),
            "total_bytes_per_device": round(m.need_per_device),
            "device_memory_bytes": m.memory_per_device,
            "usable_bytes_per_device": round(m.usable_per_device),
            "memory_utilization": m.utilization,
            "fits": m.fits,
            "fits_on_one_device": self.fits_on_one_device,
            "comfortable": m.comfortable,
            "headroom_over_weights_pct": None if headroom is None else round(100 * headroom, 1),
            "min_devices": self.min_devices,
            "valid_tensor_parallel_sizes": list(self.tp_sizes) if self.tp_sizes is not None else None,
            "max_concurrency": self.max_concurrency,
            "max_context_tokens": self.max_context,
            "decode_step_ms_bound": d.seconds * 1000,
            "decode_tokens_per_s_bound": self.decode_tokens_per_s_bound,
            "aggregate_tokens_per_s_bound": self.aggregate_tokens_per_s_bound,
            "decode_bound_by": d.bound_by,
            "decode_memory_ms": d.memory_s * 1000,
            "decode_compute_ms": None if d.compute_s is None else d.compute_s * 1000,
            "decode_communication_ms": d.comm_s * 1000,
            "decode_communication": _comm_dict(d),
            "layout": _layout_dict(self.layout),
            "tdp_w_per_device": self.hardware.tdp_w,
            "power_w_at_tdp": self.power_w,
            "decode_tokens_per_joule_at_tdp": self.tokens_per_joule_bound,
            "decode_bytes_per_step_per_device": round(d.bytes),
            "decode_flops_per_step_per_device": d.flops,
            "ttft_ms_bound": self.ttft_ms_bound,
            "prefill_bound_by": p.bound_by,
            "bandwidth_bytes_per_s": self.hardware.bandwidth_bytes_per_s,
            "compute_flops_per_s": d.compute,
            "compute_dtype": d.compute_dtype,
            "notes": list(self.notes),
        }

    def explain(self) -> list[str]:
        """Every figure as its formula with the numbers put in."""
        return ex.explain_lines(self)

    def summary(self) -> list[str]:
        return ex.summary_lines(self)


def _layout_dict(layout: Layout | None) -> LayoutJson | None:
    if layout is None:
        return None
    return {"kind": layout.kind, "devices": layout.devices, "group": layout.group, "stages": layout.stages,
            "link": layout.link.name if layout.link else None,
            "stage_link": layout.stage_link.name if layout.stage_link else None, "description": layout.describe()}  # fmt: skip


def _comm_dict(step: StepBound) -> CommunicationJson | None:
    comm = step.comm
    if comm is None:
        return None
    trips: list[TripJson] = [{"what": t.what, "algorithm": t.algorithm, "count": t.count, "group": t.group, "hops": t.hops,
              "bytes_on_link": t.bytes_on_link, "link": t.link.name, "latency_ms": t.latency_s * 1000,
              "transfer_ms": t.transfer_s * 1000} for t in comm.trips]  # fmt: skip
    return {"message_bytes": comm.message_bytes, "latency_ms": comm.latency_s * 1000,
            "transfer_ms": comm.transfer_s * 1000, "trips": trips}  # fmt: skip


def resolve_precision(model: ModelSpec, precision: str | Precision | None) -> Precision:
    if isinstance(precision, Precision):
        return precision
    if precision:
        return get_precision(precision)
    if model.native_precision in PRECISIONS:
        return PRECISIONS[model.native_precision]
    # A GGUF type without a row of ours: its real bits per weight, from the file.
    bits = model.weight_bytes(None).total * 8 / max(model.params_total, 1)
    return Precision(
        model.native_precision, bits, bits, "int8", f"GGUF file type: {bits:.2f} bits per weight in the file", gguf=True
    )


def _check_inputs(
    hw: Hardware, devices: int | None, context: int, concurrency: int, input_tokens: int, utilization: float
) -> None:
    if context < 1:
        raise InvalidInput("context", "must be at least 1 token")
    if concurrency < 1:
        raise InvalidInput("concurrency", "must be at least 1")
    if devices is not None and devices < 1:
        raise InvalidInput("devices", "must be at least 1")
    if not 1 <= input_tokens <= context:
        raise UsageError(f"input tokens ({input_tokens}) must be between 1 and the context ({context})")
    if not 0 < utilization <= 1:
        raise UsageError("memory utilization must be in (0, 1]")
    if hw.kind == "cpu" and devices is not None and devices > 1:
        raise InvalidInput("devices", "a CPU is planned as one device")


def plan(
    model: ModelSpec | str,
    hardware: Hardware | str,
    *,
    devices: int | None = None,
    precision: str | Precision | None = None,
    kv_dtype: str = "fp16",
    context: int = 4096,
    concurrency: int = 1,
    input_tokens: int | None = None,
    utilization: float = DEFAULT_UTILIZATION,
    link: str | None = None,
) -> PlanResult:
    """Memory, device count and speed-of-light bounds. Without `devices`, the minimum that fits is used.
    `link` names the interconnect inside a group (nvlink4, pcie5-x16 ...; default: the device's first)."""
    spec = load_model(model) if isinstance(model, str) else model
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    prompt = context if input_tokens is None else input_tokens
    _check_inputs(hw, devices, context, concurrency, prompt, utilization)
    prec = resolve_precision(spec, precision)
    kvb = kv_dtype_bytes(kv_dtype)
    fewest = min_devices(spec, hw, prec, kvb, context, concurrency, utilization)
    n = devices or fewest or 1
    basis = "given" if devices else ("minimum" if fewest else "none fits")
    mem = memory_plan(spec, hw, n, prec, kvb, context, concurrency, utilization)
    one = mem if n == 1 else memory_plan(spec, hw, 1, prec, kvb, context, concurrency, utilization)
    layout = layout_for(spec, hw, n, link)
    result = PlanResult(
        model=spec,
        hardware=hw,
        precision=prec,
        kv_dtype=kv_dtype,
        kv_bytes_per_element=kvb,
        context=context,
        concurrency=concurrency,
        input_tokens=prompt,
        devices=n,
        devices_basis=basis,
        memory=mem,
        fits_on_one_device=one.fits,
        min_devices=fewest,
        tp_sizes=valid_tp_sizes(spec) if shards_by_heads(hw) else None,
        max_concurrency=max_concurrency(mem, spec),
        max_context=max_context(spec, hw, n, prec, kvb, concurrency, utilization),
        decode=decode_step(spec, hw, n, prec, kvb, context, concurrency, layout),
        prefill=prefill(spec, hw, n, prec, kvb, prompt),
        notes=(),
        layout=layout,
    )
    return _with_notes(result)


def _with_notes(r: PlanResult) -> PlanResult:
    return replace(r, notes=tuple(ex.plan_notes(r)))


# ---------------------------------------------------------------------------------------------
# Refusal text for a launcher


@dataclass(frozen=True)
class FitVerdict:
    fits: bool
    message: str
    min_devices: int | None
    suggestions: tuple[str, ...]
    plan: PlanResult


# Cheaper checkpoints to suggest, best quality first: (precision, how to say it).
_CHEAPER = (("fp8", "an FP8 checkpoint"), ("int8", "an INT8 (W8A8) checkpoint"), ("awq-int4", "an INT4 AWQ checkpoint"))


def check_fit(
    model: ModelSpec | str,
    hardware: Hardware | str,
    devices: int | None = 1,
    precision: str | Precision | None = None,
    context: int = 4096,
    concurrency: int = 1,
    *,
    kv_dtype: str = "fp16",
    utilization: float = DEFAULT_UTILIZATION,
) -> FitVerdict:
    """Will it fit as configured? If not, a one-line message saying why and what would."""
    r = plan(model, hardware, devices=devices or 1, precision=precision, kv_dtype=kv_dtype,
             context=context, concurrency=concurrency, utilization=utilization)  # fmt: skip
    if r.memory.fits:
        return FitVerdict(True, ex.fits_message(r), r.min_devices, (), r)
    tips = _with_verb(_weights_tips(r) if not r.memory.weights_fit else _kv_tips(r))
    head = ex.weights_refusal(r) if not r.memory.weights_fit else ex.kv_refusal(r)
    message = f"{head}: {_join(tips)}" if tips else f"{head}; no cheaper precision or device count in reach fixes it"
    return FitVerdict(False, message, r.min_devices, tuple(tips), r)


def _join(tips: list[str]) -> str:
    return tips[0] if len(tips) == 1 else ", ".join(tips[:-1]) + ", or " + tips[-1]


def _same(r: PlanResult, *, precision: Precision | None = None, kv_dtype: str | None = None) -> PlanResult:
    """The same plan with a cheaper precision or KV cache dtype."""
    return plan(r.model, r.hardware, devices=r.devices, precision=precision or r.precision,
                kv_dtype=kv_dtype or r.kv_dtype, context=r.context, concurrency=r.concurrency,
                utilization=r.memory.utilization, link=r.layout.link.name if r.layout and r.layout.link else None)  # fmt: skip


def _parallel_tip(r: PlanResult) -> list[str]:
    n = r.min_devices
    if n is None or n <= r.devices:
        return []
    if r.hardware.kind == "sram":
        return [f"{n} chips"]
    if r.hardware.kind == "cpu":
        return []
    if n > r.hardware.devices_per_node:
        return [f"{n} GPUs (more than one {r.hardware.devices_per_node}-GPU node: add --pipeline-parallel-size)"]
    return [f"--tensor-parallel-size {n}"]


def _with_verb(tips: list[str]) -> list[str]:
    """The first tip must read as an instruction: '--tensor-parallel-size 4' -> 'use --tensor-parallel-size 4'."""
    if tips and not tips[0].startswith(("use ", "lower ", "run ")):
        return [f"use {tips[0]}", *tips[1:]]
    return tips


def _weights_tips(r: PlanResult) -> list[str]:
    tips = []
    for name, words in _CHEAPER:
        cheaper = PRECISIONS[name]
        if name == "fp8" and "fp8" not in r.hardware.flops:
            continue  # no FP8 units: an FP8 checkpoint would run dequantized; INT8 is the better tip
        if cheaper.bits_per_weight < r.precision.bits_per_weight and _same(r, precision=cheaper).memory.fits:
            tips.append(f"use {words}")
            break
    return tips + _parallel_tip(r)


def _kv_tips(r: PlanResult) -> list[str]:
    tips = []
    if r.max_context and r.max_context < r.context:
        tips.append(f"lower --max-model-len to {r.max_context}")
    if r.max_concurrency and r.max_concurrency < r.concurrency:
        tips.append(f"run at most {r.max_concurrency} sequences (--max-num-seqs {r.max_concurrency})")
    if r.kv_bytes_per_element > 1 and _same(r, kv_dtype="fp8").memory.fits:
        tips.append("use --kv-cache-dtype fp8")
    return tips + _parallel_tip(r)


# ---------------------------------------------------------------------------------------------
# Efficiency of a measurement


def _pct(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or numerator <= 0 or denominator <= 0:
        return None
    return 100.0 * numerator / denominator


def efficiency(
    measured_decode_tok_s_per_stream: float | None,
    measured_ttft_ms: float | None,
    plan_result: PlanResult,
    *,
    measured_aggregate_tok_s: float | None = None,
    measured_tokens_per_joule: float | None = None,
) -> Efficiency:
    """Measurements as a percentage of the speed of light, and a warning for any that beats it.

    decode: measured tok/s ÷ bound × 100. TTFT is a time, so its efficiency is bound ÷ measured × 100:
    100 % means at the physical limit for both. Energy: measured output tokens per joule ÷ the plan's
    tokens per joule at TDP (the aggregate bound with every device at its TDP) × 100; a reference, not
    a limit (devices may draw less than TDP). Undefined figures are None, never 0.
    """
    r = plan_result
    decode = _pct(measured_decode_tok_s_per_stream, r.decode_tokens_per_s_bound)
    ttft = _pct(r.ttft_ms_bound, measured_ttft_ms)
    aggregate = _pct(measured_aggregate_tok_s, r.aggregate_tokens_per_s_bound)
    energy = _pct(measured_tokens_per_joule, r.tokens_per_joule_bound)
    measured = _Measured(measured_decode_tok_s_per_stream, measured_aggregate_tok_s, measured_ttft_ms)
    return Efficiency(
        hardware=r.hardware.name,
        devices=r.devices,
        model=r.model.name,
        precision=r.precision.name,
        decode_tokens_per_s_bound=r.decode_tokens_per_s_bound,
        aggregate_tokens_per_s_bound=r.aggregate_tokens_per_s_bound,
        ttft_ms_bound=r.ttft_ms_bound,
        decode_pct_of_bound=decode,
        aggregate_pct_of_bound=aggregate,
        ttft_pct_of_bound=ttft,
        decode_bound_by=r.decode.bound_by,
        decode_communication_ms=r.decode.comm_s * 1000,
        tdp_w_per_device=r.hardware.tdp_w,
        decode_tokens_per_joule_at_tdp=r.tokens_per_joule_bound,
        tokens_per_joule_pct_of_tdp_reference=energy,
        # Without a compute figure (a CPU) the TTFT bound only counts reading the weights: loose.
        ttft_bound_memory_only=r.prefill.compute is None,
        warnings=_caveats(r, measured, _Shares(decode, aggregate, ttft)),
    )


@dataclass(frozen=True, slots=True)
class _Measured:
    decode_tok_s_per_stream: float | None
    aggregate_tok_s: float | None
    ttft_ms: float | None


@dataclass(frozen=True, slots=True)
class _Shares:
    """The measurements as a % of their bounds (efficiency's figures)."""

    decode: float | None
    aggregate: float | None
    ttft: float | None


def _caveats(r: PlanResult, m: _Measured, pct: _Shares) -> list[RunWarning]:
    """A coded warning for each measurement that beats its bound, with the figures that beat it."""
    where = f"{r.devices} × {r.hardware.name}, {r.model.name} in {r.precision.name}"
    out = []
    if pct.decode is not None and pct.decode > 100:
        message = (f"measurement beats the bound: decode {m.decode_tok_s_per_stream:.1f} tok/s per stream > "
                   f"{r.decode_tokens_per_s_bound:.1f} tok/s possible on {where}: the hardware, model or precision "
                   "is wrong, or the measurement is")  # fmt: skip
        speeds = (m.decode_tok_s_per_stream, r.decode_tokens_per_s_bound, pct.decode)
        out.append(_speed_caveat("efficiency.decode_beats_bound", message, *speeds))
    if pct.aggregate is not None and pct.aggregate > 100:
        message = (f"measurement beats the bound: {m.aggregate_tok_s:.1f} tok/s in aggregate > "
                   f"{r.aggregate_tokens_per_s_bound:.1f} tok/s possible on {where}")  # fmt: skip
        speeds = (m.aggregate_tok_s, r.aggregate_tokens_per_s_bound, pct.aggregate)
        out.append(_speed_caveat("efficiency.aggregate_beats_bound", message, *speeds))
    if pct.ttft is not None and pct.ttft > 100:
        message = (f"measurement beats the bound: TTFT {m.ttft_ms:.1f} ms < {r.ttft_ms_bound:.1f} ms minimum "
                   f"for {r.input_tokens} prompt tokens on {where}: check the prompt length, prefix caching, "
                   "or the setup")  # fmt: skip
        figures: dict[str, float | int | str | None] = {
            "measured_ms": m.ttft_ms,
            "bound_ms": r.ttft_ms_bound,
            "input_tokens": r.input_tokens,
            "pct_of_bound": pct.ttft,
        }
        out.append(RunWarning(code="efficiency.ttft_beats_bound", message=message, figures=figures))
    return out


def _speed_caveat(code: WarningCode, message: str, measured: float | None, bound: float, pct: float) -> RunWarning:
    figures: dict[str, float | int | str | None] = {
        "measured_tokens_per_s": measured,
        "bound_tokens_per_s": bound,
        "pct_of_bound": pct,
    }
    return RunWarning(code=code, message=message, figures=figures)


__all__ = ["FitVerdict", "PlanResult", "check_fit", "efficiency", "plan", "resolve_precision"]
