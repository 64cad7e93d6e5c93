"""One run, fresh or read back: a single run, a sweep or a profile, from `tokenrace bench`, `sweep`,
the embedded profile, a saved directory or another tool's result file.

Everything downstream (show, compare, report) renders from this one type and never re-measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter, ValidationError

from tokenrace.errors import UsageError
from tokenrace.model.files import RECORDS, read_jsonl
from tokenrace.model.manifest import Manifest
from tokenrace.model.monitor import TimeseriesLine
from tokenrace.model.records import RequestRecord
from tokenrace.model.run import Knee, ProfileFile, SweepFile
from tokenrace.model.summary import Summary
from tokenrace.monitor import load_timeseries

Kind = Literal["run", "sweep", "profile"]


@dataclass(slots=True)
class Run:
    directory: Path
    kind: Kind
    data: Summary | SweepFile | ProfileFile  # summary.json, or sweep.json / profile.json
    manifest: Manifest = field(default_factory=Manifest)  # a sweep's or profile's: its first step's
    steps: list[tuple[str, Run]] = field(default_factory=list)
    interrupted: bool = False  # a fresh run stopped early (Ctrl-C, or every worker lost)
    _records: list[RequestRecord] | None = None

    @property
    def summary(self) -> Summary:
        """A single run's summary.json; a sweep or a profile has none (see `sweep`)."""
        if not isinstance(self.data, Summary):
            raise UsageError(f"{self.directory} is a {self.kind}, not a single run")
        return self.data

    @property
    def sweep(self) -> SweepFile | ProfileFile:
        """A sweep's sweep.json or a profile's profile.json."""
        if isinstance(self.data, Summary):
            raise UsageError(f"{self.directory} is a single run, not a sweep or a profile")
        return self.data

    @property
    def sweep_kind(self) -> str | None:
        """What a sweep ramped (concurrency, rate, input_tokens, goodput); None for a profile or a run."""
        return self.data.sweep if isinstance(self.data, SweepFile) else None

    @property
    def knee(self) -> Knee | None:
        """A sweep's knee, when it found one."""
        return self.data.knee if isinstance(self.data, SweepFile) else None

    @property
    def name(self) -> str:
        label = self.manifest.settings.label
        if not label and isinstance(self.data, SweepFile):
            label = self.data.label
        return label or self.directory.name

    @property
    def failed_threshold(self) -> bool:
        """A single run whose error rate passed its limit (`--max-error-rate`)."""
        return isinstance(self.data, Summary) and self.data.exceeded_max_error_rate

    @property
    def any_interrupted(self) -> bool:
        """This run or one of its steps stopped early."""
        return self.interrupted or any(r.interrupted for _, r in self.steps)

    def records(self) -> list[RequestRecord]:
        """records.jsonl lines (every phase); a line that is not a record (cut by a crash) is skipped."""
        if self._records is None:
            path = self.directory / RECORDS
            self._records = _record_lines(read_jsonl(path)) if path.is_file() else []
        return self._records

    def measured_ok(self) -> list[RequestRecord]:
        return [r for r in self.records() if r.phase == "measure" and r.error_kind is None]

    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records() if r.phase == "measure" and r.error_kind != "cancelled"]

    def timeseries(self) -> list[TimeseriesLine]:
        """Monitor samples (timeseries.jsonl), when the run has them."""
        return load_timeseries(self.directory)


_RECORD_LINES = TypeAdapter(list[RequestRecord])


def _record_lines(lines: Sequence[object]) -> list[RequestRecord]:
    """Every line as a record, validated at once (twice as fast as line by line); when one is not a
    record, line by line without it."""
    try:
        return _RECORD_LINES.validate_python(lines)
    except ValidationError:
        return [r for r in map(_record_line, lines) if r is not None]


def _record_line(line: object) -> RequestRecord | None:
    try:
        return RequestRecord.model_validate(line)
    except ValidationError:
        return None
