"""Saved results, read back: a run, a sweep or a profile directory, or another tool's result file.

Everything downstream (show, compare, report) renders from these files and never re-measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenrace.bench.history import PROFILE_FILE, SWEEP_FILE, dir_kind, resolve_run
from tokenrace.bench.store import MANIFEST, RECORDS, SUMMARY, load_records, read_json
from tokenrace.errors import UsageError

TIMESERIES = "timeseries.jsonl"


@dataclass(slots=True)
class RunData:
    path: Path
    kind: str  # run | sweep | profile
    summary: dict[str, Any]  # summary.json, or sweep.json / profile.json
    manifest: dict[str, Any] = field(default_factory=dict)
    steps: list[tuple[str, RunData]] = field(default_factory=list)
    _records: list[dict[str, Any]] | None = None

    @property
    def name(self) -> str:
        label = (self.manifest.get("settings") or {}).get("label") or self.summary.get("label")
        return label or self.path.name

    def records(self) -> list[dict[str, Any]]:
        """records.jsonl lines (every phase)."""
        if self._records is None:
            self._records = load_records(self.path) if (self.path / RECORDS).is_file() else []
        return self._records

    def measured_ok(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("phase") == "measure" and r.get("error_kind") is None]

    def measured(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("phase") == "measure" and r.get("error_kind") != "cancelled"]

    def timeseries(self) -> list[dict[str, Any]]:
        """Monitor samples (timeseries.jsonl), when the run has them."""
        path = self.path / TIMESERIES
        return load_records_file(path) if path.is_file() else []


def load_records_file(path: Path) -> list[dict[str, Any]]:
    import orjson

    out = []
    for line in path.read_bytes().splitlines():
        if line.strip():
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line cut by a crash
            if isinstance(obj, dict):
                out.append(obj)
    return out


def load(ref: str | Path) -> RunData:
    """A directory (run, sweep, profile), a history id or name, or a vLLM/AIPerf result file."""
    path = resolve_run(ref)
    if path.is_file():
        from tokenrace.bench.importers import import_file

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
    from tokenrace.bench.session import BenchResult
    from tokenrace.bench.sweep import step_row

    rows = []
    for name, run in steps:
        row = step_row(name, BenchResult(run.path, run.summary, run.manifest))
        rows.append({**row, "value": row["concurrency"]})
    return rows
