"""How big a model's weights are, for `tokenrace doctor --model`.

The planner (`tokenrace.plan.load_model`) is asked first; when it cannot size the model, a local
path is measured on disk instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenrace import plan
from tokenrace.errors import InvalidInput, TokenraceError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ggml")
SIZE_FIELDS = ("weights_bytes", "weight_bytes", "weights_size_bytes", "weights_size", "size_bytes", "total_bytes")


@dataclass(frozen=True)
class ModelSize:
    name: str
    weights_bytes: int | None
    source: str  # "planner", "local files" or "unknown"
    local_path: str | None
    note: str = ""


def looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~", ".\\")) or name.endswith(WEIGHT_SUFFIXES) or os.path.isabs(name)


def model_size(name: str) -> ModelSize:
    local = Path(name).expanduser()
    if looks_like_path(name) and not local.exists():
        raise InvalidInput("model", f"no such file or folder: {name}")
    from_planner, note = _planner_bytes(name)
    local_path = str(local) if local.exists() else None
    if from_planner:
        return ModelSize(name, from_planner, "planner", local_path, note)
    if local_path:
        return ModelSize(name, local_bytes(local), "local files", local_path, f"{note}; measured the files on disk")
    return ModelSize(name, None, "unknown", None, f"{note}, and it is not a local path")


def local_bytes(path: Path) -> int:
    """A weights file's size, or the weight files in a folder (all files when none look like weights)."""
    if path.is_file():
        return path.stat().st_size
    files = [p for p in path.rglob("*") if p.is_file()]
    weights = [p for p in files if p.name.endswith(WEIGHT_SUFFIXES)]
    return sum(p.stat().st_size for p in (weights or files))


def _planner_bytes(name: str) -> tuple[int | None, str]:
    try:
        info = plan.load_model(name)
    except (TokenraceError, OSError, ValueError, KeyError) as err:
        return None, f"the planner could not load {name}: {err}"
    found = weights_bytes(info)
    return (found, "") if found else (None, "the planner gave no weights size")


def weights_bytes(info: Any) -> int | None:
    """The weights size from whatever the planner returns (an object or a mapping)."""
    for field in SIZE_FIELDS:
        value = info.get(field) if isinstance(info, Mapping) else getattr(info, field, None)
        if callable(value):
            value = value()
        if isinstance(value, (int, float)) and value > 0:
            return int(value)
    return None
