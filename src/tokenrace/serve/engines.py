"""Command lines for GPU engines, with the parameters the deployment guides tune.

Building a command is pure (testable without a GPU); running it goes through EngineProcess.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import dataclass, field

from tokenrace.errors import UsageError

ENGINES = ("vllm", "sglang", "llamacpp")

INSTALL = {
    "vllm": "pip install vllm (on a Linux machine with an NVIDIA GPU and a matching CUDA driver)",
    "sglang": "pip install 'sglang[all]' (on a Linux machine with an NVIDIA GPU)",
    "llamacpp": "build llama.cpp with -DGGML_CUDA=ON, or run scripts/setup.sh for the CPU build",
}


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
        if self.engine not in ENGINES:
            raise UsageError(f"--engine must be one of {', '.join(ENGINES)}")
        if self.tensor_parallel_size < 1:
            raise UsageError("--tensor-parallel-size must be at least 1")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise UsageError("--gpu-memory-utilization must be in (0, 1]")


def _opt(flag: str, value: object | None) -> list[str]:
    return [] if value is None else [flag, str(value)]


def build_command(spec: LaunchSpec, llama_server: str = "llama-server") -> list[str]:
    spec.validate()
    if spec.engine == "vllm":
        return [
            "vllm",
            "serve",
            spec.model,
            "--host",
            spec.host,
            "--port",
            str(spec.port),
            "--tensor-parallel-size",
            str(spec.tensor_parallel_size),
            *_opt("--max-model-len", spec.max_model_len),
            *_opt("--gpu-memory-utilization", spec.gpu_memory_utilization),
            *_opt("--dtype", spec.dtype),
            *_opt("--quantization", spec.quantization),
            *_opt("--max-num-seqs", spec.max_num_seqs),
            *spec.extra,
        ]
    if spec.engine == "sglang":
        return [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            spec.model,
            "--host",
            spec.host,
            "--port",
            str(spec.port),
            "--tp-size",
            str(spec.tensor_parallel_size),
            *_opt("--context-length", spec.max_model_len),
            *_opt("--mem-fraction-static", spec.gpu_memory_utilization),
            *_opt("--dtype", spec.dtype),
            *_opt("--quantization", spec.quantization),
            *_opt("--max-running-requests", spec.max_num_seqs),
            "--enable-metrics",
            *spec.extra,
        ]
    return [
        llama_server,
        "-m",
        spec.model,
        "--host",
        spec.host,
        "--port",
        str(spec.port),
        "-ngl",
        str(spec.gpu_layers if spec.gpu_layers is not None else 999),
        *_opt("-c", spec.max_model_len),
        *_opt("-np", spec.parallel or spec.max_num_seqs),
        *(["--split-mode", "layer"] if spec.tensor_parallel_size > 1 else []),
        "--metrics",
        *spec.extra,
    ]


def installed(engine: str, llama_server: str | None = None) -> bool:
    if engine == "vllm":
        return shutil.which("vllm") is not None
    if engine == "sglang":
        return importlib.util.find_spec("sglang") is not None
    return llama_server is not None
