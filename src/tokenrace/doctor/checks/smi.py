"""nvidia-smi: does the user-space driver reach the GPU, and which driver and CUDA version is it?"""

from __future__ import annotations

from tokenrace.doctor import knowledge, parse
from tokenrace.doctor.checks.common import in_container
from tokenrace.doctor.checks.kernel import follows_from, root_cause
from tokenrace.doctor.registry import Context, Finding, check, fail, from_kb, ok, skip
from tokenrace.doctor.result import Status
from tokenrace.model.environment import GpuInfo


@check("nvidia-smi", "nvidia-smi talks to the driver", needs_gpu=True)
def nvidia_smi(ctx: Context) -> Finding:
    res = ctx.run("nvidia-smi")
    if res.missing:
        return _smi_missing(ctx)
    if res.timed_out:
        return from_kb(Status.FAIL, "nvidia-smi hung and was stopped", "gpu-fallen-off-bus")
    driver, cuda = parse.smi_header(res.stdout)
    if not res.ok or driver is None:
        return _smi_failed(ctx, res.output, res.returncode)
    query = ctx.run("nvidia-smi-query")
    gpus = parse.smi_query(query.stdout) if query.ok else []
    names = [g.name for g in gpus] or parse.smi_table_gpus(res.stdout)
    listing = f"{len(names)}x {names[0]}" if names and len(set(names)) == 1 else ", ".join(names) or "no GPU rows"
    listed = [GpuInfo(name=g.name, memory_mib=g.memory_mib, bus_id=g.bus_id) for g in gpus]
    return ok(f"driver {driver}, CUDA {cuda}, {listing}", driver=driver, cuda=cuda, gpus=listed)


def _smi_missing(ctx: Context) -> Finding:
    if ctx.gpu_on_bus() is None:
        return skip("nvidia-smi not found and no NVIDIA device was detected")
    if ctx.status("container") is Status.FAIL:
        return follows_from(ctx.results["container"], "nvidia-smi is not available in this container")
    if in_container(ctx):
        return from_kb(Status.FAIL, "nvidia-smi is not available in this container", "container-no-gpu")
    return from_kb(Status.FAIL, "nvidia-smi is not installed: no NVIDIA driver", "smi-not-found")


def _smi_failed(ctx: Context, output: str, returncode: int | None) -> Finding:
    first = next((line.strip() for line in output.splitlines() if line.strip()), "no output")
    summary = f"nvidia-smi failed (exit {returncode}): {first.split('. ')[0].rstrip('.')}"
    item = knowledge.best(output)
    if item is None:
        return fail(
            summary,
            "nvidia-smi printed an error doctor does not know.",
            "Run `tokenrace doctor --explain` with the message.",
        )
    upstream = root_cause(ctx) if item.id == "smi-no-driver" else None
    if upstream is None and item.id == "smi-no-driver" and ctx.status("nvidia-module") is Status.FAIL:
        upstream = ctx.results["nvidia-module"]
    return follows_from(upstream, summary) if upstream else from_kb(Status.FAIL, summary, item.id)
