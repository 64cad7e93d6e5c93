"""A saved result read back: a run, a sweep or a profile directory, or another tool's result file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenrace.model.files import RECORDS, read_jsonl
from tokenrace.monitor import load_timeseries


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
            self._records = read_jsonl(self.path / RECORDS) if (self.path / RECORDS).is_file() else []
        return self._records

    def measured_ok(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("phase") == "measure" and r.get("error_kind") is None]

    def measured(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("phase") == "measure" and r.get("error_kind") != "cancelled"]

    def timeseries(self) -> list[dict[str, Any]]:
        """Monitor samples (timeseries.jsonl), when the run has them."""
        return load_timeseries(self.path)
