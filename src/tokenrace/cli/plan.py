"""`tokenrace plan`: will a model fit, on how many devices, and how fast can it possibly decode?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import click
from rich.console import Console

from tokenrace.cli.common import echo_json
from tokenrace.plan import catalog_hardware, load_model, plan
from tokenrace.plan.catalog import Hardware, model_rows
from tokenrace.plan.explain import fmt_bandwidth, fmt_bytes, fmt_memory
from tokenrace.plan.memory import DEFAULT_UTILIZATION, kv_bytes_per_sequence
from tokenrace.plan.modelspec import ModelSpec
from tokenrace.plan.planner import LayoutJson, PlanJson, PlanResult, resolve_precision
from tokenrace.plan.precision import get_precision, kv_dtype_bytes
from tokenrace.plan.published import (
    PointJson,
    check_point,
    nearest_published,
    published_points,
    published_unbounded,
    unbounded_line,
)
from tokenrace.plan.tables import comparison_table, devices_table
from tokenrace.table import to_rich

# The guides' precision table: 2, 1 and 0.5 bytes per parameter.
TABLE_PRECISIONS = ("bf16", "int8", "int4")


@click.command("plan")
@click.option(
    "--model",
    "model_name",
    help="Catalog name (llama-3.1-8b, gemma-4-31b ...), a config.json or model folder, or a .gguf file.",
)
@click.option(
    "--hardware",
    help="Catalog device (H100-SXM, RTX-4090, Groq-LPU ...) or 'cpu' for this machine. Omit for a table over the catalog.",
)
@click.option("--devices", type=int, help="Device count (tensor-parallel size). Default: the fewest that fit.")
@click.option(
    "--precision",
    help="Weights: fp32, bf16, fp16, fp8, int8, int4, awq, gptq, q4_0, q4_k_m, q8_0 ... Default: the model's own.",
)
@click.option("--kv-dtype", default="fp16", show_default=True, help="KV cache: fp16, bf16, fp8, q8_0, q4_0.")
@click.option("--context", type=int, default=4096, show_default=True, help="Tokens per sequence (prompt + output).")
@click.option("--concurrency", type=int, default=1, show_default=True, help="Sequences running at once.")
@click.option("--input-tokens", type=int, help="Prompt tokens for the TTFT bound (default: the whole context).")
@click.option(
    "--memory-utilization",
    type=float,
    default=DEFAULT_UTILIZATION,
    show_default=True,
    help="Share of device memory usable (vLLM's gpu_memory_utilization).",
)
@click.option(
    "--link",
    help="Interconnect inside a tensor-parallel group: nvlink4, pcie5-x16, nvlink4-bridge ... (--list shows each "
    "device's). Default: the device's first.",
)
@click.option("--explain", is_flag=True, help="Print every formula with the figures put in.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--list", "list_catalog", is_flag=True, help="List the catalog's models and devices, with sources.")
def command(
    model_name: str | None,
    hardware: str | None,
    devices: int | None,
    precision: str | None,
    kv_dtype: str,
    context: int,
    concurrency: int,
    input_tokens: int | None,
    memory_utilization: float,
    link: str | None,
    explain: bool,
    as_json: bool,
    list_catalog: bool,
) -> None:
    """Memory, device count and the speed-of-light bounds for a model on a device."""
    if list_catalog:
        _print_catalog(as_json)
        return
    if not model_name:
        raise click.UsageError("--model is required (or --list to see the catalog)")
    model = load_model(model_name)
    common = Conditions(precision, kv_dtype, context, concurrency, input_tokens, memory_utilization)
    if hardware:
        result = common.plan(model, hardware, devices, precision, link)
        _print_plan(result, explain, as_json)
    else:
        if link:
            raise click.UsageError("--link needs --hardware (each device has its own links)")
        _print_table(model, devices, common, explain, as_json)


@dataclass(frozen=True)
class Conditions:
    """What every plan of one command shares: the options besides the model, device and count."""

    precision: str | None
    kv_dtype: str
    context: int
    concurrency: int
    input_tokens: int | None
    utilization: float

    def plan(
        self, model: ModelSpec, hw: Hardware | str, devices: int | None, precision: str | None, link: str | None = None
    ) -> PlanResult:
        return plan(model, hw, devices=devices, precision=precision, kv_dtype=self.kv_dtype, context=self.context,
                    concurrency=self.concurrency, input_tokens=self.input_tokens, utilization=self.utilization,
                    link=link)  # fmt: skip


class PlanOutput(PlanJson):
    """`plan --hardware ... --json`: the plan and the nearest published point (with --explain, the formulas)."""

    published: PointJson | None
    published_unbounded: list[dict[str, str | float]]  # the model's speeds on hardware with no bound


def _print_plan(result: PlanResult, explain: bool, as_json: bool) -> None:
    near = nearest_published(result.model, result.hardware, result.devices)
    elsewhere = published_unbounded(result.model)
    if as_json:
        data = PlanOutput(**result.to_dict(), published=near.to_dict() if near else None,
                          published_unbounded=[r.model_dump() for r in elsewhere])  # fmt: skip
        echo_json({**data, "explain": result.explain()} if explain else data)
        return
    for line in result.summary():
        click.echo(line)
    if near:
        click.echo(f"published {near.line()}")
    else:
        click.echo(
            "published no published speed for this model in the reference table (tokenrace plan --list shows it)"
        )
    for row in elsewhere:
        click.echo(f"published {unbounded_line(row)}")
    if explain:
        click.echo("")
        for line in result.explain():
            click.echo(line)


def _table_precisions(model: ModelSpec, precision: str | None) -> list[str]:
    if precision:
        return [get_precision(precision).name]
    native = resolve_precision(model, None).name
    return [native] if model.gguf else list(TABLE_PRECISIONS)


def _plans(
    model: ModelSpec, hw: Hardware, devices: int | None, precisions: list[str], common: Conditions
) -> list[PlanResult]:
    return [common.plan(model, hw, devices if hw.kind != "cpu" else None, p) for p in precisions]


def _print_table(model: ModelSpec, devices: int | None, common: Conditions, explain: bool, as_json: bool) -> None:
    precisions = _table_precisions(model, common.precision)
    rows = [(hw, _plans(model, hw, devices, precisions, common)) for hw in catalog_hardware()]
    if as_json:
        echo_json({"model": model.name, "context_tokens": common.context, "concurrency": common.concurrency,
                   "rows": [_row_json(r) for _, plans in rows for r in plans]})  # fmt: skip
        return
    first = rows[0][1]
    kv = kv_bytes_per_sequence(model, common.context, kv_dtype_bytes(common.kv_dtype))
    weights = " · ".join(f"{r.precision.name} {fmt_bytes(r.weights_bytes)}" for r in first)
    click.echo(f"{model.name}: {model.describe()}")
    click.echo(f"weights {weights}; KV {fmt_bytes(kv)} per {common.context:,}-token sequence ({common.kv_dtype}), "
               f"× {common.concurrency} sequence(s)")  # fmt: skip
    Console(highlight=False, width=max(100, Console().width)).print(to_rich(devices_table(rows), compact=True))
    click.echo("cells: fewest devices that hold weights + KV + overhead at 0.9 utilization × decode bound in tok/s per stream"
               " at that count (green: one device, comfortable; yellow: one device, tight). --hardware NAME for one device"
               " (cpu: this machine).")  # fmt: skip
    _print_comparison(model, [(hw, plans[0]) for hw, plans in rows])
    if explain:
        click.echo("decode bound = 1 ÷ (max(bytes read per step ÷ bandwidth, FLOPs per step ÷ compute) + communication on "
                   "the token's path); run with --hardware and --explain for the figures.")  # fmt: skip


def _print_comparison(model: ModelSpec, rows: list[tuple[Hardware, PlanResult]]) -> None:
    """One precision, every device: what it takes and what it can do, in tokens per second and per joule."""
    click.echo("")
    Console(highlight=False, width=max(120, Console().width)).print(
        to_rich(comparison_table(model, rows), compact=True)
    )
    click.echo("tok/J: the decode bound ÷ (devices × TDP), every device at TDP; a reference, not a bound. SRAM layouts are "
               "the plan's assumption (the real one is the compiler's); --hardware NAME --explain prints every term.")  # fmt: skip


class TableRowJson(TypedDict):
    """One device and precision of `plan --model M --json` (no --hardware): a few of `PlanJson`'s keys."""

    hardware: str
    precision: str
    devices: int
    min_devices: int | None
    fits_on_one_device: bool
    comfortable: bool
    weights_bytes: int
    total_bytes: int
    total_bytes_per_device: int
    usable_bytes_per_device: int
    max_concurrency: int | None
    decode_tokens_per_s_bound: float
    aggregate_tokens_per_s_bound: float
    decode_bound_by: str
    decode_communication_ms: float
    layout: LayoutJson | None
    ttft_ms_bound: float
    tdp_w_per_device: float | None
    decode_tokens_per_joule_at_tdp: float | None


def _row_json(r: PlanResult) -> TableRowJson:
    d = r.to_dict()
    return TableRowJson(
        hardware=d["hardware"],
        precision=d["precision"],
        devices=d["devices"],
        min_devices=d["min_devices"],
        fits_on_one_device=d["fits_on_one_device"],
        comfortable=d["comfortable"],
        weights_bytes=d["weights_bytes"],
        total_bytes=d["total_bytes"],
        total_bytes_per_device=d["total_bytes_per_device"],
        usable_bytes_per_device=d["usable_bytes_per_device"],
        max_concurrency=d["max_concurrency"],
        decode_tokens_per_s_bound=d["decode_tokens_per_s_bound"],
        aggregate_tokens_per_s_bound=d["aggregate_tokens_per_s_bound"],
        decode_bound_by=d["decode_bound_by"],
        decode_communication_ms=d["decode_communication_ms"],
        layout=d["layout"],
        ttft_ms_bound=d["ttft_ms_bound"],
        tdp_w_per_device=d["tdp_w_per_device"],
        decode_tokens_per_joule_at_tdp=d["decode_tokens_per_joule_at_tdp"],
    )


def _print_catalog(as_json: bool) -> None:
    models = {r.name: (r, load_model(r.name)) for r in model_rows()}
    devices = catalog_hardware()
    if as_json:
        echo_json({"models": [{"name": k, "label": m.name, "aliases": list(r.aliases), "params": m.params_total,
                               "source": m.source} for k, (r, m) in models.items()],
                   "hardware": [{"name": h.name, "aliases": list(h.aliases), "memory_bytes": h.memory_bytes,
                                 "bandwidth_bytes_per_s": h.bandwidth_bytes_per_s, "source": h.source,
                                 "tdp_w": h.tdp_w, "tdp_source": h.tdp_source or None,
                                 "links": [{"name": x.name, "label": x.label, "topology": x.topology, "count": x.count,
                                            "bandwidth_bytes_per_s": x.bandwidth_bytes_per_s, "latency_s": x.latency_s,
                                            "scope": x.scope, "source": x.source} for x in h.links]} for h in devices]
                   + [{"name": "cpu", "memory_bytes": None, "bandwidth_bytes_per_s": None,
                       "source": "measured when asked for"}],
                   "published": [check_point(p).to_dict() for p in published_points()],
                   "published_unbounded": [r.model_dump() for r in published_unbounded()]})  # fmt: skip
        return
    for key, (_, m) in models.items():
        click.echo(f"model     {key:<20} {m.describe()}  [{m.source}]")
    for h in devices:
        click.echo(
            f"hardware  {h.name:<20} {fmt_memory(h):>8} {fmt_bandwidth(h.bandwidth_bytes_per_s):>10}  [{h.source}]"
        )
    click.echo(
        f"hardware  {'cpu':<20} {'RAM':>8} {'measured':>10}  [this machine: memory from the OS, bandwidth probed]"
    )
    for h in devices:
        if h.tdp_w:
            click.echo(f"tdp       {h.name:<20} {h.tdp_w:>6g} W  [{h.tdp_source}]")
    seen: set[str] = set()
    for h in devices:
        for x in h.links:
            if x.name not in seen:
                seen.add(x.name)
                latency = "latency not published" if x.latency_s is None else f"{x.latency_s * 1e6:g} µs per hop"
                click.echo(
                    f"link      {x.name:<20} {x.bandwidth_bytes_per_s / 1e9:>6g} GB/s each way, {latency}  [{x.source}]"
                )
    for p in published_points():
        click.echo(f"published {check_point(p).line()}")
    for row in published_unbounded():
        click.echo(f"published {unbounded_line(row)}")
