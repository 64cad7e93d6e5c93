"""The files of a saved run: their names, the one schema version they carry, and their models."""

from __future__ import annotations

from pydantic import BaseModel

from tokenrace.model.history import HistoryRow
from tokenrace.model.manifest import Manifest
from tokenrace.model.records import RecordLine
from tokenrace.model.run import ProfileFile, SweepFile
from tokenrace.model.summary import Summary

# Written into records.jsonl lines, summary.json, manifest.json, sweep.json and profile.json.
SCHEMA_VERSION = 2  # 2: warnings are typed (code, message, figures) in one list

RECORDS = "records.jsonl"
SUMMARY = "summary.json"
MANIFEST = "manifest.json"
TIMESERIES = "timeseries.jsonl"  # monitor samples, when the run has them
SWEEP = "sweep.json"
PROFILE = "profile.json"

FILE_MODELS: dict[str, type[BaseModel]] = {
    RECORDS: RecordLine,
    SUMMARY: Summary,
    MANIFEST: Manifest,
    SWEEP: SweepFile,
    PROFILE: ProfileFile,
    "history-row": HistoryRow,
}
