"""Inside a container: are the GPU device nodes there? On a host with Docker: is the toolkit there?"""

from __future__ import annotations

from tokenrace.doctor.checks.common import device_nodes, in_container
from tokenrace.doctor.registry import Context, Finding, check, from_kb, ok, skip
from tokenrace.doctor.result import Status


@check("container", "GPU devices inside a container", linux_only=True)
def container(ctx: Context) -> Finding:
    if not in_container(ctx):
        return _host_toolkit(ctx)
    nodes = device_nodes(ctx)
    visible = ctx.probe.env("NVIDIA_VISIBLE_DEVICES")
    if nodes:
        return ok(f"in a container with {len(nodes)} NVIDIA device node(s)", in_container=True, nodes=nodes)
    if ctx.gpu_on_bus() is False:
        return skip("in a container, and there is no NVIDIA GPU on the bus either", in_container=True, nodes=[])
    hint = f"NVIDIA_VISIBLE_DEVICES={visible} is set but no runtime acted on it. " if visible else ""
    summary = "in a container without /dev/nvidia* devices: it was started without GPUs"
    here = f"{hint}Restart it with docker run --gpus all ... (or the runtime's equivalent)."
    return from_kb(Status.FAIL, summary, "container-no-gpu", extra_fix=here, in_container=True, nodes=[])


def _host_toolkit(ctx: Context) -> Finding:
    if ctx.gpu_on_bus() is not True or ctx.run("docker").missing:
        return skip("not in a container", in_container=False)
    if ctx.run("nvidia-ctk").missing:
        summary = "Docker is installed but the NVIDIA Container Toolkit is not: containers will not see the GPU"
        return from_kb(Status.WARN, summary, "container-no-gpu", in_container=False)
    return ok("host has Docker and the NVIDIA Container Toolkit", in_container=False)
