"""`tokenrace serve`: start the embedded llama.cpp model, a GPU engine, or the fake server."""

from __future__ import annotations

import asyncio
import shlex
import signal
import threading
from pathlib import Path
from typing import Any

import click

from tokenrace.cli.common import Options, parse_json_object
from tokenrace.engines import LAUNCHABLE
from tokenrace.errors import EngineError, UsageError
from tokenrace.serve.embedded import (
    EmbeddedOptions,
    default_model,
    find_llama_server,
    llama_server_command,
    require_binary,
)
from tokenrace.serve.engines import INSTALL, LaunchSpec, build_command, default_port, installed
from tokenrace.serve.fit import check as check_fit
from tokenrace.serve.fit import detect_gpu
from tokenrace.serve.launch import RunningEngine, start_embedded, start_vllm_cpu
from tokenrace.serve.process import EngineProcess, wait_ready
from tokenrace.serve.vllm_cpu import (
    DEFAULT_MAX_MODEL_LEN,
    VllmCpuOptions,
    hf_folder,
    require_vllm_python,
    vllm_cpu_command,
    vllm_cpu_env,
)


@click.command("serve")
@click.argument("model_arg", metavar="[MODEL]", required=False)
@click.option("--engine", type=click.Choice(["embedded", *LAUNCHABLE]), default="embedded", show_default=True)
@click.option(
    "--model",
    "model_opt",
    help="GGUF file (embedded, llamacpp) or model id/path (vllm, sglang). "
    "vllm with no MODEL or a GGUF file, on a machine without a GPU: vLLM's CPU build serves it "
    "(default: the embedded model).",
)
@click.option("--fake", is_flag=True, help="Serve the fake OpenAI server (a measuring instrument) instead.")
@click.option("--fake-config", help='JSON settings for --fake, e.g. \'{"ttft_ms": 100, "itl_ms": 10}\'.')
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port",
    type=int,
    help="Default: a free port (embedded, fake), else the engine's own ("
    + ", ".join(f"{name} {default_port(name)}" for name in LAUNCHABLE)
    + ").",
)
@click.option(
    "--threads", type=int, help="CPU threads (embedded; default: cores - 1, leaving one for the client and HTTP)."
)
@click.option("--ctx-size", type=int, default=8192, show_default=True, help="Context size in tokens (embedded).")
@click.option("--parallel", type=int, default=4, show_default=True, help="Parallel slots (llama.cpp).")
@click.option("--tensor-parallel-size", type=int, default=1, show_default=True)
@click.option("--max-model-len", type=int)
@click.option("--gpu-memory-utilization", type=float)
@click.option("--dtype")
@click.option("--quantization")
@click.option("--max-num-seqs", type=int)
@click.option("--gpu-layers", type=int, help="llama.cpp: layers to offload (default all).")
@click.option("--hardware", help="GPU model for the fit check (a `tokenrace plan` catalog name); default: detected.")
@click.option("--dry-run", is_flag=True, help="Print the exact command and exit.")
@click.option("--force", is_flag=True, help="Launch even when the planner says the model does not fit.")
@click.option("--ready-timeout", type=float, default=600.0, show_default=True, help="Seconds to wait for readiness.")
def command(
    model_arg: str | None, model_opt: str | None, engine: str, fake: bool, fake_config: str | None, **o: Any
) -> None:
    """Start an engine, wait until it answers a real request, print its URL, stop on Ctrl-C."""
    model = model_opt or model_arg
    if fake:
        _serve_fake(parse_json_object(fake_config, "--fake-config"), str(o["host"]), o["port"])
        return
    if engine == "embedded":
        _serve_embedded(model, o)
        return
    if engine == "vllm" and _on_cpu(model, o):
        _serve_vllm_cpu(model, o)
        return
    _serve_engine(engine, model, o)


def _on_cpu(model: str | None, o: Options) -> bool:
    """`--engine vllm` with no MODEL (or a GGUF file), no --hardware and no GPU here: vLLM's CPU
    build. A model id, or a GPU named, keeps the GPU launch (its command, its fit check)."""
    gguf = model is None or model.endswith(".gguf")
    return gguf and not o["hardware"] and detect_gpu()[1] == 0


def _wait_for_ctrl_c() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def _serve_embedded(model: str | None, o: Options) -> None:
    opts = EmbeddedOptions(
        model=Path(model) if model else None,
        port=o["port"],
        host=str(o["host"]),
        threads=o["threads"],
        ctx_size=int(o["ctx_size"]),
        parallel=int(o["parallel"]),
    )
    if o["dry_run"]:
        click.echo(
            shlex.join(llama_server_command(require_binary(), opts.model or default_model(), opts.port or 0, opts))
        )
        return
    _serve_until_ctrl_c(asyncio.run(start_embedded(opts, float(o["ready_timeout"]))), "llama-server")


def _serve_until_ctrl_c(engine: RunningEngine, program: str) -> None:
    try:
        click.echo(f"serving {engine.model} at {engine.base_url} ({program} pid {engine.proc.pid}); Ctrl-C stops it")
        _wait_for_ctrl_c()
    finally:
        engine.stop()


def _serve_vllm_cpu(model: str | None, o: Options) -> None:
    """No GPU here: vLLM's CPU build (.venv-vllm) serves the embedded model (or MODEL, a GGUF file or
    a Hugging Face folder), the GGUF turned into a Hugging Face folder once."""
    opts = VllmCpuOptions(
        model=Path(model) if model else None,
        port=o["port"],
        host=str(o["host"]),
        max_model_len=int(o["max_model_len"] or DEFAULT_MAX_MODEL_LEN),
        max_num_seqs=o["max_num_seqs"],
    )
    if o["dtype"]:
        opts.dtype = str(o["dtype"])
    if o["dry_run"]:
        source = opts.model or default_model()
        folder = hf_folder(source) if source.suffix == ".gguf" else source
        name = source.stem if source.suffix == ".gguf" else source.name
        click.echo("# no GPU detected: vLLM's CPU build, the GGUF turned into a Hugging Face folder once", err=True)
        env = " ".join(f"{k}={v}" for k, v in vllm_cpu_env(opts).items())
        click.echo(f"{env} {shlex.join(vllm_cpu_command(require_vllm_python(), folder, name, opts.port or 0, opts))}")
        return
    click.echo("no GPU detected: starting vLLM's CPU build (.venv-vllm; about a minute)...", err=True)
    _serve_until_ctrl_c(asyncio.run(start_vllm_cpu(opts, float(o["ready_timeout"]))), "vllm")


def _serve_engine(engine: str, model: str | None, o: Options) -> None:
    if not model:
        raise UsageError(f"--engine {engine} needs a MODEL (an id such as meta-llama/Llama-3.1-8B-Instruct, or a path)")
    spec = LaunchSpec(
        engine=engine,
        model=model,
        host=str(o["host"]),
        port=int(o["port"] or default_port(engine)),
        tensor_parallel_size=int(o["tensor_parallel_size"]),
        max_model_len=o["max_model_len"],
        gpu_memory_utilization=o["gpu_memory_utilization"],
        dtype=o["dtype"],
        quantization=o["quantization"],
        max_num_seqs=o["max_num_seqs"],
        gpu_layers=o["gpu_layers"],
        parallel=int(o["parallel"]),
    )
    llama = find_llama_server()
    argv = build_command(spec, str(llama) if llama else "llama-server")
    fit = check_fit(spec, o["hardware"])
    if o["dry_run"]:
        click.echo(f"# fit: {fit.message}", err=True)
        click.echo(shlex.join(argv))
        return
    if fit.fits is False and not o["force"]:
        raise UsageError(f"refusing to launch: {fit.message} (or pass --force)")
    click.echo(f"fit: {fit.message}", err=True)
    if not installed(engine, str(llama) if llama else None):
        raise EngineError(f"{engine} is not installed: {INSTALL[engine]}")
    proc = EngineProcess(argv, engine).start()
    try:
        ready = asyncio.run(wait_ready(proc, f"http://{spec.host}:{spec.port}", None, float(o["ready_timeout"])))
        click.echo(
            f"serving {ready.model} at http://{spec.host}:{spec.port}/v1 ({engine} pid {proc.pid}); Ctrl-C stops it"
        )
        _wait_for_ctrl_c()
    finally:
        proc.stop()


def _serve_fake(config: Options, host: str, port: int | None) -> None:
    from tokenrace.fakes.fake_server import serve  # noqa: PLC0415 - import cost: the fake server loads only for --fake

    def ready(url: str) -> None:
        click.echo(f"fake OpenAI server at {url}/v1 (a measuring instrument, not a model); Ctrl-C stops it")

    asyncio.run(serve(config, host, port or 0, ready_cb=ready, freeze_gc=True))
