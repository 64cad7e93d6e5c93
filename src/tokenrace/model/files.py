"""The files of a saved run: their names, the one schema version they carry, and their models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from tokenrace.model.base import SCHEMA_VERSION as SCHEMA_VERSION  # defined beside the base model
from tokenrace.model.claim import CLAIM_FILE, CLAIM_SCHEMA_VERSION, ClaimFile
from tokenrace.model.history import HistoryRow
from tokenrace.model.manifest import Manifest
from tokenrace.model.quality import QUALITY_SCHEMA_VERSION as QUALITY_SCHEMA_VERSION
from tokenrace.model.quality import QualityResult
from tokenrace.model.records import RequestRecord
from tokenrace.model.run import ProfileFile, SweepFile
from tokenrace.model.summary import Summary

# quality.json and comparison.json (a quality pass and two compared) carry QUALITY_SCHEMA_VERSION, and
# claim.json CLAIM_SCHEMA_VERSION: their layouts have their own history, so a change to the run's
# files does not make older readers refuse them.

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
    RECORDS: RequestRecord,
    SUMMARY: Summary,
    MANIFEST: Manifest,
    SWEEP: SweepFile,
    PROFILE: ProfileFile,
    "history-row": HistoryRow,
    QUALITY: QualityResult,
    CLAIM_FILE: ClaimFile,
}
# The schema_version each file carries, where it is not SCHEMA_VERSION.
FILE_VERSIONS = {QUALITY: QUALITY_SCHEMA_VERSION, CLAIM_FILE: CLAIM_SCHEMA_VERSION}


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
