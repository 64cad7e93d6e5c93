"""Saved results, read back: a run, a sweep or a profile directory, or another tool's result file.

Everything downstream (show, compare, report) renders from these files and never re-measures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenrace.runs.history import PROFILE_FILE, SWEEP_FILE, dir_kind, resolve_run
from tokenrace.runs.importers import import_file
from tokenrace.runs.rows import step_row
from tokenrace.runs.saved import RunData
from tokenrace.runs.store import MANIFEST, SUMMARY, read_json
from tokenrace.errors import UsageError

def load(ref: str | Path) -> RunData:
    """A directory (run, sweep, profile), a history id or name, or a vLLM/AIPerf result file."""
    path = resolve_run(ref)
    if path.is_file():
        return import_file(path)
    return load_dir(path)


def load_dir(path: Path) -> RunData:
    kind = dir_kind(path)
    if kind == "run":
        return RunData(path, "run", read_json(path / SUMMARY), read_json(path / MANIFEST))
    if kind is None:
        raise UsageError(
            f"{path} is not a run, sweep or profile directory (no summary.json, sweep.json or profile.json)"
        )
    summary = read_json(path / (SWEEP_FILE if kind == "sweep" else PROFILE_FILE))
    steps = [
        (row["step"], load_dir(path / row["step"]))
        for row in summary.get("steps", [])
        if dir_kind(path / row["step"]) == "run"
    ]
    manifest = steps[0][1].manifest if steps else {}
    if kind == "profile":
        summary["steps"] = _profile_rows(steps)
    return RunData(path, kind, summary, manifest, steps)


def _profile_rows(steps: list[tuple[str, RunData]]) -> list[dict[str, Any]]:
    """A profile's step rows rebuilt from its run directories, in the sweep's row layout (older
    profile.json files lack some keys)."""
    rows = []
    for name, run in steps:
        row = step_row(name, run.path, run.summary, run.manifest)
        rows.append({**row, "value": row["concurrency"]})
    return rows
