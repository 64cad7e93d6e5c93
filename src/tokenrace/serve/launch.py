"""Start an engine, wait until it really answers, and describe it for the run manifest."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import JsonValue

from tokenrace.model.engine import EngineRecord, ModelFile
from tokenrace.serve.embedded import (
    EmbeddedOptions,
    binary_env,
    default_model,
    llama_server_command,
    model_record,
    require_binary,
)
from tokenrace.serve.process import EngineProcess, free_port, wait_ready
from tokenrace.serve.vllm_cpu import (
    VllmCpuOptions,
    converted,
    require_vllm_python,
    vllm_cpu_command,
    vllm_cpu_env,
    vllm_version,
)


@dataclass(slots=True)
class RunningEngine:
    proc: EngineProcess
    root: str  # http://host:port
    model: str
    info: EngineRecord = field(default_factory=EngineRecord)  # what the manifest's `engine` says
    provider: str = "llamacpp"  # the engines catalog's name for it (its /metrics names, its routes)

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    @property
    def record(self) -> dict[str, JsonValue]:
        """`info` as the JSON object the run settings, quality passes and profiles still take."""
        return self.info.model_dump(mode="json")

    def stop(self) -> None:
        self.proc.stop()


def llama_server_version(binary: Path, env: dict[str, str]) -> str | None:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip()
    return None


async def start_embedded(
    opts: EmbeddedOptions, timeout_s: float = 120.0, log_path: Path | None = None
) -> RunningEngine:
    binary = require_binary()
    model = opts.model or default_model()
    info = model_record(model)
    port = opts.port or free_port(opts.host)
    argv = llama_server_command(binary, model, port, opts)
    env = binary_env(binary)
    proc = EngineProcess(argv, "llama-server", env=env, log_path=log_path).start()
    root = f"http://{opts.host}:{port}"
    try:
        ready = await wait_ready(proc, root, None, timeout_s, probe="embeddings" if opts.embeddings else "chat")
    except BaseException:
        proc.stop()
        raise
    record = EngineRecord(
        engine="llama.cpp (llama-server)",
        version=llama_server_version(binary, {**env}),
        binary=str(binary),
        model_file=info,
        threads=argv[argv.index("-t") + 1],
        parallel_slots=opts.parallel,
        ctx_size=opts.ctx_size,
        embeddings=opts.embeddings,
        launch_command=argv,
        readiness=ready,
    )
    return RunningEngine(proc, root, str(ready.model), record)


async def start_vllm_cpu(opts: VllmCpuOptions, timeout_s: float = 600.0, log_path: Path | None = None) -> RunningEngine:
    """vLLM's CPU build (.venv-vllm) serving the embedded model, or the GGUF file or Hugging Face
    folder `opts.model` names; a GGUF file is turned into a folder first, once (cached)."""
    python = require_vllm_python()
    source = opts.model or default_model()
    gguf = source if source.suffix == ".gguf" else None
    folder = converted(gguf, python) if gguf else source
    info = model_record(gguf) if gguf else ModelFile(path=str(folder))
    port = opts.port or free_port(opts.host)
    argv = vllm_cpu_command(python, folder, (gguf or folder).stem if gguf else folder.name, port, opts)
    env = vllm_cpu_env(opts)
    proc = EngineProcess(argv, "vllm", env=env, log_path=log_path).start()
    root = f"http://{opts.host}:{port}"
    try:
        ready = await wait_ready(proc, root, None, timeout_s, probe="embeddings" if opts.embeddings else "chat")
    except BaseException:
        proc.stop()
        raise
    record = EngineRecord(
        engine="vLLM (CPU build)",
        version=vllm_version(python),
        binary=str(python),
        model_file=info,
        ctx_size=opts.max_model_len,
        embeddings=opts.embeddings,
        launch_command=argv,
        readiness=ready,
    )
    return RunningEngine(proc, root, str(ready.model), record, provider="vllm")


async def start_engine(opts: EmbeddedOptions | VllmCpuOptions) -> RunningEngine:
    """The engine the options are for: llama.cpp's llama-server, or vLLM's CPU build."""
    if isinstance(opts, VllmCpuOptions):
        return await start_vllm_cpu(opts)
    return await start_embedded(opts)
