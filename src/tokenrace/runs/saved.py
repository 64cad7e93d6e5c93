"""A saved result read back: a run, a sweep or a profile directory, or another tool's result file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenrace.errors import UsageError
from tokenrace.model.files import RECORDS, TIMESERIES
from tokenrace.model.summary import Summary
from tokenrace.runs.store import read_jsonl


@dataclass(slots=True)
class RunData:
    path: Path
    kind: str  # run | sweep | profile
    data: Summary | dict[str, Any]  # summary.json, or sweep.json / profile.json
    manifest: dict[str, Any] = field(default_factory=dict)
    steps: list[tuple[str, RunData]] = field(default_factory=list)
    _records: list[dict[str, Any]] | None = None

    @property
    def summary(self) -> Summary:
        """A run's summary.json; a sweep or a profile has none (see `sweep`)."""
        if not isinstance(self.data, Summary):
            raise UsageError(f"{self.path} is a {self.kind}, not a single run")
        return self.data

    @property
    def sweep(self) -> dict[str, Any]:
        """A sweep's sweep.json or a profile's profile.json."""
        if isinstance(self.data, Summary):
            raise UsageError(f"{self.path} is a single run, not a sweep or a profile")
        return self.data

    @property
    def name(self) -> str:
        label = (self.manifest.get("settings") or {}).get("label")
        if not label and not isinstance(self.data, Summary):
            label = self.data.get("label")
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
        path = self.path / TIMESERIES
        return read_jsonl(path) if path.is_file() else []
