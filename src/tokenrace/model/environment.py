"""manifest.json's `environment`: the machine a run ran on (doctor's `collect_environment`).

What could not be learnt is None. A key the collector did not look for is left out of the file, not
written as null: the slow probes (`nvcc`, `torch`, `engines`) appear only when they ran, and an
environment that could not be collected holds only its `error`.
"""

from __future__ import annotations

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from tokenrace.model.base import _Model


class _Facts(_Model):
    """Written with only the keys that were set (read or given), as the collector made them."""

    # No return annotation: pydantic would take it as the serialization schema, and the JSON Schema
    # of these models would lose their fields.
    @model_serializer(mode="wrap")
    def _only_set_keys(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        data = handler(self)
        kept = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in kept}


class GpuInfo(_Model):
    """One GPU as NVML or nvidia-smi lists it."""

    name: str
    memory_mib: int | None = None
    bus_id: str | None = None


class TorchInfo(_Facts):
    """What the PyTorch probe printed (doctor/commands.py TORCH_SCRIPT): only `installed` when it is not."""

    installed: bool | None = None
    version: str | None = None
    cuda: str | None = None  # the CUDA version the build is for; None: a CPU build
    available: bool | None = None  # torch.cuda.is_available()
    error: str | None = None
    warnings: list[str] | None = None
    device_count: int | None = None
    device_name: str | None = None
    capability: list[int] | None = None  # (major, minor) of GPU 0
    arch_list: list[str] | None = None  # sm_XY / compute_XY the build carries kernels for


class Environment(_Facts):
    """The machine: GPUs, driver, CUDA, CPU, RAM, OS, Python and tokenrace versions."""

    error: str | None = None  # why it could not be collected (then nothing else is set)
    gpus: list[GpuInfo] = Field(default_factory=list)
    gpu_count: int | None = None
    driver: str | None = None
    cuda: str | None = None  # the highest CUDA version the driver supports
    gpu_source: str | None = None  # nvml | nvidia-smi
    nvidia_pci_devices: int | None = None
    cpu_model: str | None = None
    cpu_cores: int | None = None  # logical
    ram_total_bytes: int | None = None
    os: str | None = None
    kernel: str | None = None
    python: str | None = None
    tokenrace: str | None = None
    # The slow probes (collect_environment(fast=False)): absent unless they ran.
    nvcc: str | None = None
    torch: TorchInfo | None = None
    engines: dict[str, str | None] | None = None  # package -> installed version
