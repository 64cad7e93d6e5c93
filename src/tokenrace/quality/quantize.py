"""A smaller quantization of a GGUF, made on this machine with llama.cpp's `llama-quantize`.

The tool is built in the same compile as `llama-server` (scripts/setup.sh). The copy is cached in
tokenrace's data directory under a name holding the source's hash, so it is made once per source.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tokenrace.errors import EngineError
from tokenrace.paths import home
from tokenrace.serve.embedded import INSTALL_HINT, binary_env, find_llama_server, sha256_of


def find_llama_quantize() -> Path | None:
    """`$TOKENRACE_LLAMA_QUANTIZE`, then beside llama-server, then PATH."""
    env = os.environ.get("TOKENRACE_LLAMA_QUANTIZE")
    if env:
        return Path(env) if Path(env).is_file() else None
    server = find_llama_server()
    if server is not None and (server.parent / "llama-quantize").is_file():
        return server.parent / "llama-quantize"
    found = shutil.which("llama-quantize")
    return Path(found) if found else None


def cache_dir() -> Path:
    return home() / "models"


def quantized_copy(source: Path, qtype: str = "Q2_K", timeout_s: float = 900.0) -> Path:
    """The cached `qtype` copy of `source`, made now if missing. Raises EngineError on failure."""
    target = cache_dir() / f"{source.stem}-{qtype}-{sha256_of(source)[:12]}.gguf"
    if target.is_file() and target.stat().st_size > 0:
        return target
    tool = find_llama_quantize()
    if tool is None:
        raise EngineError(f"llama-quantize is not installed: {INSTALL_HINT}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    # --allow-requantize: the shipped model is already quantized (Q4_1); llama.cpp refuses to
    # quantize a quantized file again unless asked, because the result is worse than quantizing the
    # original weights. That is part of what the comparison measures, and docs/quality.md says so.
    argv = [str(tool), "--allow-requantize", str(source), str(tmp), qtype, str(max(1, (os.cpu_count() or 2) - 1))]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **binary_env(tool)}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        tmp.unlink(missing_ok=True)
        raise EngineError(f"llama-quantize failed: {exc}") from None
    if out.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-8:])
        raise EngineError(f"llama-quantize exited with code {out.returncode}. Last lines:\n{tail}")
    os.replace(tmp, target)
    return target
