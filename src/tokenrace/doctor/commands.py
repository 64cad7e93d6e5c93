"""Every command doctor may run, by a short name. The name is also the fixture file's name."""

from __future__ import annotations

import re
import sys

from tokenrace.engines import ENGINES

TORCH_SCRIPT = """
import importlib.util, json, warnings
if importlib.util.find_spec("torch") is None:
    print(json.dumps({"installed": False})); raise SystemExit(0)
import torch
out = {"installed": True, "version": torch.__version__, "cuda": torch.version.cuda}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        out["available"] = bool(torch.cuda.is_available())
    except Exception as err:
        out["available"], out["error"] = False, str(err)[:500]
out["warnings"] = [str(w.message)[:500] for w in caught]
if out["available"]:
    out["device_count"] = torch.cuda.device_count()
    out["device_name"] = torch.cuda.get_device_name(0)
    out["capability"] = list(torch.cuda.get_device_capability(0))
    out["arch_list"] = torch.cuda.get_arch_list()
print(json.dumps(out))
"""

ENGINE_PACKAGES = (*(e.package for e in ENGINES.values() if e.package), "torch")
ENGINES_SCRIPT = f"""
import json
from importlib import metadata
out = {{}}
for dist in {ENGINE_PACKAGES!r}:
    try:
        out[dist] = metadata.version(dist)
    except metadata.PackageNotFoundError:
        out[dist] = None
print(json.dumps(out))
"""

GPU_QUERY = "--query-gpu=index,name,memory.total,driver_version,pci.bus_id"

COMMANDS: dict[str, tuple[str, ...]] = {
    "lspci": ("lspci",),
    "lsmod": ("lsmod",),
    "dmesg": ("dmesg",),
    "nvidia-smi": ("nvidia-smi",),
    "nvidia-smi-query": ("nvidia-smi", GPU_QUERY, "--format=csv,noheader,nounits"),
    "nvcc": ("nvcc", "--version"),
    "dkms": ("dkms", "status"),
    "uname": ("uname", "-r"),
    "mokutil": ("mokutil", "--sb-state"),
    "torch": (sys.executable, "-c", TORCH_SCRIPT),
    "engines": (sys.executable, "-c", ENGINES_SCRIPT),
    "llama-server": ("llama-server", "--version"),
    "nvidia-ctk": ("nvidia-ctk", "--version"),
    "docker": ("docker", "--version"),
}

TIMEOUTS: dict[str, float] = {"torch": 60.0, "nvidia-smi": 15.0, "nvidia-smi-query": 15.0}
DEFAULT_TIMEOUT = 10.0

_BY_ARGV = {argv: name for name, argv in COMMANDS.items()}


def command_key(argv: tuple[str, ...]) -> str:
    """The fixture name of a command: its COMMANDS name, else a slug of the command line."""
    if argv in _BY_ARGV:
        return _BY_ARGV[argv]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", " ".join(argv)).strip("_")[:80]


def display(argv: tuple[str, ...]) -> str:
    """How a command is shown as evidence (a Python one-liner is shown by its purpose)."""
    if argv and argv[0] == sys.executable and len(argv) > 1 and argv[1] == "-c":
        return f"python -c <{command_key(argv)} probe>"
    return " ".join(argv)
