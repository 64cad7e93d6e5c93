"""The CUDA toolkit and PyTorch, each against the highest CUDA version the driver supports."""

from __future__ import annotations

import sys
from typing import TypedDict

import orjson

from tokenrace.doctor import knowledge, parse
from tokenrace.doctor.checks.common import device_nodes, in_container, major_minor
from tokenrace.doctor.checks.kernel import follows_from
from tokenrace.doctor.registry import Context, Finding, check, from_kb, ok, skip, warn
from tokenrace.doctor.result import Status
from tokenrace.model.environment import TorchInfo

TOOLKIT_PATHS = ("/usr/local/cuda/bin/nvcc", "/opt/cuda/bin/nvcc")
# CUDA versions PyTorch has published wheels for (download.pytorch.org/whl/cuXYZ), oldest first.
WHEEL_CUDA = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))


@check("cuda-toolkit", "CUDA toolkit (nvcc) within the driver's CUDA")
def cuda_toolkit(ctx: Context) -> Finding:
    res = ctx.run("nvcc")
    if res.missing:
        elsewhere = next((p for p in TOOLKIT_PATHS if ctx.probe.exists(p)), None)
        if elsewhere:
            return from_kb(
                Status.WARN, f"nvcc is installed at {elsewhere} but not on PATH", "nvcc-not-found", nvcc_path=elsewhere
            )
        return skip("nvcc is not installed (only needed to compile CUDA code)")
    nvcc = parse.nvcc_release(res.output)
    driver_cuda = ctx.text_detail("nvidia-smi", "cuda")
    if nvcc is None:
        return skip("cannot read nvcc's version")
    if ctx.gpu_on_bus() is False:
        return skip(f"nvcc {nvcc} is installed, but there is no NVIDIA GPU to run its programs", nvcc=nvcc)
    if driver_cuda is None:
        return skip(f"nvcc {nvcc} found; the driver's CUDA version is unknown (see nvidia-smi)", nvcc=nvcc)
    if _newer(nvcc, driver_cuda):
        here = f"Here: install toolkit {driver_cuda} or older, or a driver whose CUDA version is at least {nvcc}."
        summary = f"toolkit CUDA {nvcc} is newer than the driver supports (CUDA {driver_cuda})"
        return from_kb(
            Status.FAIL, summary, "toolkit-newer-than-driver", extra_fix=here, nvcc=nvcc, driver_cuda=driver_cuda
        )
    return ok(f"nvcc {nvcc}, driver supports up to CUDA {driver_cuda}", nvcc=nvcc, driver_cuda=driver_cuda)


def _newer(version: str, ceiling: str) -> bool:
    mine, top = major_minor(version), major_minor(ceiling)
    return bool(mine and top and mine > top)


@check("torch", "PyTorch's CUDA build against the driver")
def torch(ctx: Context) -> Finding:
    res = ctx.run("torch")
    if res.missing or res.timed_out:
        return skip("cannot run Python to look at PyTorch" if res.missing else "importing torch did not finish in time")
    info = _torch_line(res.stdout)
    if info is None:
        return warn(
            "the PyTorch probe failed",
            f"It printed: {res.output.strip()[:200]}",
            "Run python -c 'import torch' to see the error.",
        )
    if not info.installed:
        return skip(f"PyTorch is not installed in this Python ({sys.executable})")
    version, built_for = str(info.version), info.cuda
    facts = TorchFacts(version=version, cuda=built_for, available=info.available)
    if built_for is None:
        return _cpu_build(ctx, facts)
    return (
        _versions(ctx, built_for, facts)
        or _availability(ctx, info, facts)
        or _arch(info, facts)
        or ok(f"PyTorch {version} (CUDA {built_for}) sees {info.device_count or 0} GPU(s)", **facts)
    )


class TorchFacts(TypedDict):
    """What every finding of the torch check carries in its details."""

    version: str
    cuda: str | None  # the CUDA version the build is for
    available: bool | None  # torch.cuda.is_available()


def _cpu_build(ctx: Context, facts: TorchFacts) -> Finding:
    version = facts["version"]
    if ctx.gpu_on_bus() is False:
        return ok(f"PyTorch {version} (CPU build; there is no GPU here)", **facts)
    driver_cuda = ctx.text_detail("nvidia-smi", "cuda")
    tag = wheel_tag(driver_cuda)
    here = (
        f"Here: pip install torch --index-url https://download.pytorch.org/whl/{tag}"
        if tag
        else "Here: pick the cuXYZ wheel at or below the driver's CUDA version on PyTorch's install page."
    )
    return from_kb(
        Status.FAIL,
        f"PyTorch {version} is a CPU-only build: it cannot use the GPU",
        "torch-cuda-mismatch",
        extra_fix=here,
        **facts,
    )


def wheel_tag(driver_cuda: str | None) -> str | None:
    """The newest PyTorch CUDA wheel tag the driver can run: '12.5' -> 'cu124'."""
    top = major_minor(driver_cuda)
    fitting = [v for v in WHEEL_CUDA if top and v <= top]
    return f"cu{fitting[-1][0]}{fitting[-1][1]}" if fitting else None


def _versions(ctx: Context, built_for: str, facts: TorchFacts) -> Finding | None:
    driver_cuda = ctx.text_detail("nvidia-smi", "cuda")
    mine, top = major_minor(built_for), major_minor(driver_cuda)
    if not (mine and top) or mine <= top:
        return None
    summary = f"PyTorch {facts['version']} is built for CUDA {built_for}, the driver supports up to {driver_cuda}"
    if mine[0] > top[0]:
        return from_kb(Status.FAIL, summary, "torch-cuda-mismatch", **facts)
    cause = (
        "Same CUDA major version: it runs through minor-version compatibility, "
        "but kernels that need a newer driver (PTX JIT) can fail."
    )
    fix = "Upgrade the driver, or install the PyTorch wheel built for the driver's CUDA version."
    return warn(summary, cause, fix, **facts)


def _availability(ctx: Context, info: TorchInfo, facts: TorchFacts) -> Finding | None:
    if info.available or ctx.gpu_on_bus() is False:
        return None
    said = " ".join([info.error or "", *(info.warnings or [])]).strip()
    if said:
        ctx.note("torch.cuda.is_available() warnings", said)
    summary = f"torch.cuda.is_available() is False (PyTorch {facts['version']}, CUDA {facts['cuda']})"
    if ctx.status("container") is Status.FAIL:
        return follows_from(ctx.results["container"], summary)
    if in_container(ctx) and not device_nodes(ctx):
        return from_kb(Status.FAIL, f"{summary}: the container has no GPU", "torch-cuda-unavailable", **facts)
    item = knowledge.best(said) if said else None
    return from_kb(Status.FAIL, summary, item.id if item else "torch-cuda-unavailable", **facts)


def _arch(info: TorchInfo, facts: TorchFacts) -> Finding | None:
    capability, arches = info.capability, info.arch_list or []
    if not capability or not arches:
        return None
    major, minor = int(capability[0]), int(capability[1])
    sm = f"sm_{major}{minor}"
    covered = sm in arches or any(_ptx_covers(a, major * 10 + minor) for a in arches)
    if covered:
        return None
    summary = f"PyTorch has no kernels for this GPU ({sm}; built for {', '.join(arches)})"
    return from_kb(Status.FAIL, summary, "no-kernel-image", capability=sm, **facts)


def _ptx_covers(arch: str, target: int) -> bool:
    """compute_XY (PTX) can be JIT-compiled for any GPU at or above XY."""
    return arch.startswith("compute_") and arch[8:].isdigit() and int(arch[8:]) <= target


def _torch_line(stdout: str) -> TorchInfo | None:
    """The probe's JSON line: the last line that is JSON, read into a model (None when it is not an object)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        # A JSON object of the wrong shape is a bug in the probe: it raises, and the runner reports the crash.
        return TorchInfo.model_validate(value) if isinstance(value, dict) else None
    return None
