"""Whether the model given with --model fits this machine's disk, RAM and GPU memory."""

from __future__ import annotations

import math
from typing import TypedDict

from tokenrace.doctor.checks.common import gib
from tokenrace.doctor.model_size import ModelSize, model_size
from tokenrace.doctor.registry import Context, Finding, check, fail, from_kb, ok, skip, warn
from tokenrace.doctor.result import Status

HEADROOM = 1.3  # the guides: keep 30-50 % over the weights for KV cache, activations and runtime


class DiskFacts(TypedDict):
    weights_bytes: int
    free_bytes: int
    cache: str


class RamFacts(TypedDict):
    weights_bytes: int
    ram_total: int
    ram_available: int


class VramFacts(TypedDict):
    weights_bytes: int
    gpu_memory_total: int
    gpus: int  # how many GPUs hold that memory


def sized(ctx: Context) -> ModelSize:
    if ctx.model_size is None:
        ctx.model_size = model_size(ctx.model or "")
    size = ctx.model_size
    shown = "unknown" if size.weights_bytes is None else gib(size.weights_bytes)
    ctx.note(f"size of {size.name} ({size.source})", f"{shown}" + (f"; {size.note}" if size.note else ""))
    return size


def hub_cache(ctx: Context) -> str:
    env = ctx.probe.env
    if env("HF_HUB_CACHE"):
        return str(env("HF_HUB_CACHE"))
    if env("HF_HOME"):
        return f"{env('HF_HOME')}/hub"
    return f"{env('XDG_CACHE_HOME') or '~/.cache'}/huggingface/hub"


@check("model-disk", "Disk space for the model", needs_model=True)
def model_disk(ctx: Context) -> Finding:
    size = sized(ctx)
    if size.weights_bytes is None:
        return skip(f"cannot size {size.name}: {size.note}")
    if size.local_path:
        return ok(f"{size.name} is already on disk ({gib(size.weights_bytes)})", weights_bytes=size.weights_bytes)
    cache = hub_cache(ctx)
    free = ctx.probe.disk_free(cache)
    ctx.note(f"free space at {cache}", "unknown" if free is None else gib(free))
    if free is None:
        return skip(f"cannot read the free space at {cache}")
    facts = DiskFacts(weights_bytes=size.weights_bytes, free_bytes=free, cache=cache)
    summary = f"download needs {gib(size.weights_bytes)}, {gib(free)} free at {cache}"
    if free < size.weights_bytes:
        cause = "The weights do not fit on the disk that holds the Hugging Face cache."
        fix = "Free space there, or set HF_HOME to a larger local disk (weights on a network disk load slowly)."
        return fail(summary, cause, fix, **facts)
    if free < size.weights_bytes * 1.2:
        return warn(summary, "Less than 20% spare after the download.", "Free some space before downloading.", **facts)
    return ok(summary, **facts)


@check("model-ram", "RAM for loading the model", needs_model=True)
def model_ram(ctx: Context) -> Finding:
    size = sized(ctx)
    memory = ctx.probe.memory()
    if size.weights_bytes is None or memory is None:
        return skip(
            f"cannot size {size.name}: {size.note}" if size.weights_bytes is None else "cannot read the RAM size"
        )
    ctx.note("RAM (total / available)", f"{gib(memory.total)} / {gib(memory.available)}")
    weights = size.weights_bytes
    facts = RamFacts(weights_bytes=weights, ram_total=memory.total, ram_available=memory.available)
    summary = f"weights {gib(weights)}, RAM {gib(memory.total)} total, {gib(memory.available)} available"
    if weights > memory.total:
        status = Status.FAIL if ctx.gpu_on_bus() is not True else Status.WARN
        return from_kb(status, f"{summary}: the weights are larger than RAM", "model-load-stalls", **facts)
    if weights > memory.available:
        return from_kb(Status.WARN, f"{summary}: not enough free RAM right now", "model-load-stalls", **facts)
    return ok(summary, **facts)


@check("model-vram", "GPU memory for the model", needs_gpu=True, needs_model=True)
def model_vram(ctx: Context) -> Finding:
    size = sized(ctx)
    memories = [g.memory_mib * 2**20 for g in ctx.smi_gpus() if g.memory_mib]
    if size.weights_bytes is None or not memories:
        return skip(
            f"cannot size {size.name}: {size.note}"
            if size.weights_bytes is None
            else "GPU memory unknown (see nvidia-smi)"
        )
    weights, total, one = size.weights_bytes, sum(memories), max(memories)
    facts = VramFacts(weights_bytes=weights, gpu_memory_total=total, gpus=len(memories))
    summary = f"weights {gib(weights)}, GPU memory {gib(total)} on {len(memories)} GPU(s)"
    if weights > total:
        return from_kb(Status.FAIL, f"{summary}: the weights alone do not fit", "cuda-oom", **facts)
    if weights * HEADROOM > total:
        return from_kb(Status.WARN, f"{summary}: little room left for the KV cache", "cuda-oom", **facts)
    need = math.ceil(weights * HEADROOM / one)
    if need > 1:
        return ok(
            f"{summary}: needs --tensor-parallel-size {_power_of_two(need)} or more",
            tensor_parallel=_power_of_two(need),
            **facts,
        )
    return ok(f"{summary}: fits one GPU with headroom", tensor_parallel=1, **facts)


def _power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()
