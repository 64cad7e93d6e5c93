"""The files of a saved run: their names, the one schema version they carry, and their models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from tokenrace.model.history import HistoryRow
from tokenrace.model.manifest import Manifest
from tokenrace.model.records import RecordLine
from tokenrace.model.run import ProfileFile, SweepFile
from tokenrace.model.summary import Summary

# Written into records.jsonl lines, summary.json, manifest.json, sweep.json and profile.json.
SCHEMA_VERSION = 2  # 2: warnings are typed (code, message, figures) in one list
# Written into quality.json and comparison.json (a quality pass and two compared): their layout has
# its own history, so a change to the run's files does not make older readers refuse them.
QUALITY_SCHEMA_VERSION = 1

RECORDS = "records.jsonl"
SUMMARY = "summary.json"
MANIFEST = "manifest.json"
TIMESERIES = "timeseries.jsonl"  # monitor samples, when the run has them
SWEEP = "sweep.json"
PROFILE = "profile.json"
ITEMS = "items.jsonl"  # a quality pass: one item and its verdict per line
QUALITY = "quality.json"  # a quality pass's result
COMPARISON = "comparison.json"  # two quality passes compared item by item

FILE_MODELS: dict[str, type[BaseModel]] = {
    RECORDS: RecordLine,
    SUMMARY: Summary,
    MANIFEST: Manifest,
    SWEEP: SweepFile,
    PROFILE: ProfileFile,
    "history-row": HistoryRow,
}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (records.jsonl, timeseries.jsonl, items.jsonl, another
    tool's export), one per line; a line cut by a crash is skipped, the rest kept. The one reader of
    JSONL files."""
    out = []
    for line in Path(path).read_bytes().splitlines():
        if line.strip():
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out
