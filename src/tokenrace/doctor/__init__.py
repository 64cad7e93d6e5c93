"""doctor: check the NVIDIA/CUDA stack, explain error messages, and record the environment.

Public API:
- `run_doctor(probe=None, model=None) -> DoctorReport` — run every check (exit code in `.exit_code`).
- `explain(text) -> list[Match]` — the knowledge-base entries that explain an error message or code.
- `collect_environment(probe=None, fast=True) -> Environment` — the cheap environment for a bench manifest.
- `probe_server_environment(session, base_url) -> ServerProbe` — the engine and version behind a server.
- `SystemProbe`, `RecordedProbe` — the real machine and a recorded one (the test seam).

Submodules are imported on first use so that `collect_environment` stays cheap to import.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run_doctor": "tokenrace.doctor.runner",
    "explain": "tokenrace.doctor.knowledge",
    "collect_environment": "tokenrace.doctor.environment",
    "probe_server_environment": "tokenrace.doctor.environment",
    "SystemProbe": "tokenrace.doctor.probe",
    "RecordedProbe": "tokenrace.doctor.probe",
    "ProbeResult": "tokenrace.doctor.probe",
    "DoctorReport": "tokenrace.doctor.result",
    "CheckResult": "tokenrace.doctor.result",
    "Status": "tokenrace.doctor.result",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tokenrace.doctor' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
