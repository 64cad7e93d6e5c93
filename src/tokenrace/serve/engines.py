"""Command lines for GPU engines, with the parameters the deployment guides tune.

Each engine's program and flags come from the catalog (tokenrace.engines). Building a command is
pure (testable without a GPU); running it goes through EngineProcess.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import dataclass, field

from tokenrace.engines import ENGINES, LAUNCHABLE, Launch
from tokenrace.errors import InvalidInput

INSTALL = {name: launch.install for name in LAUNCHABLE if (launch := ENGINES[name].launch) is not None}


@dataclass(slots=True)
class LaunchSpec:
    engine: str
    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str | None = None
    quantization: str | None = None
    max_num_seqs: int | None = None
    gpu_layers: int | None = None  # llama.cpp: layers offloaded to the GPU (-ngl)
    parallel: int | None = None  # llama.cpp: parallel slots
    extra: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.engine not in LAUNCHABLE:
            raise InvalidInput("engine", f"must be one of {', '.join(LAUNCHABLE)}, got {self.engine!r}")
        if self.tensor_parallel_size < 1:
            raise InvalidInput("tensor_parallel_size", "must be at least 1")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise InvalidInput("gpu_memory_utilization", f"must be in (0, 1], got {self.gpu_memory_utilization}")

    @property
    def flags(self) -> Launch:
        launch = ENGINES[self.engine].launch
        assert launch is not None, "validate() first"
        return launch


def _opt(flag: str | None, value: object | None) -> list[str]:
    return [] if value is None or flag is None else [flag, str(value)]


def build_command(spec: LaunchSpec, llama_server: str = "llama-server") -> list[str]:
    spec.validate()
    f = spec.flags
    program = [{"{python}": sys.executable, "{llama_server}": llama_server}.get(part, part) for part in f.program]
    model = [f.model, spec.model] if f.model else [spec.model]
    settings = [
        *_opt(f.tensor_parallel_size, spec.tensor_parallel_size),
        *_opt(f.max_model_len, spec.max_model_len),
        *_opt(f.gpu_memory_utilization, spec.gpu_memory_utilization),
        *_opt(f.dtype, spec.dtype),
        *_opt(f.quantization, spec.quantization),
        *_opt(f.max_num_seqs, spec.max_num_seqs),
    ]
    if spec.engine == "llamacpp":  # layers on the GPU and slots are llama.cpp's own settings
        settings = [
            "-ngl",
            str(spec.gpu_layers if spec.gpu_layers is not None else 999),
            *settings,
            *_opt("-np", spec.parallel or spec.max_num_seqs),
            *(["--split-mode", "layer"] if spec.tensor_parallel_size > 1 else []),
        ]
    return [*program, *model, f.host, spec.host, f.port, str(spec.port), *settings, *f.always, *spec.extra]


def installed(engine: str, llama_server: str | None = None) -> bool:
    launch = ENGINES[engine].launch if engine in ENGINES else None
    if launch is None:
        return False
    kind, name = launch.installed_as
    if kind == "command":
        return shutil.which(name) is not None
    if kind == "module":
        return importlib.util.find_spec(name) is not None
    return llama_server is not None


def default_port(engine: str) -> int:
    """The port the engine listens on unless told otherwise (what its provider preset points at)."""
    return ENGINES[engine].default_port or 8000
