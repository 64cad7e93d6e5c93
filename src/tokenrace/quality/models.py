"""The files of a quality run: items.jsonl (one ItemResult per line) and quality.json (QualityResult,
whose models live in `model/quality.py` beside the other saved files)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from tokenrace.errors import UsageError
from tokenrace.model.files import ITEMS, QUALITY, QUALITY_SCHEMA_VERSION
from tokenrace.model.quality import Accuracy, EngineInfo, QualityResult, QualityRunSettings, Score, Speed

__all__ = [
    "Accuracy",
    "EngineInfo",
    "ItemResult",
    "QualityResult",
    "QualityRunSettings",
    "Score",
    "Speed",
    "VerdictName",
    "load_quality",
    "read_items",
]

VerdictName = Literal["right", "wrong", "error"]


class ItemResult(BaseModel):
    """One item as asked and answered. `verdict` is `error` when the request failed: no answer was
    judged, and the item counts neither as right nor as wrong."""

    model_config = ConfigDict(extra="ignore")

    id: str
    suite: str
    prompt: str
    expected: dict[str, JsonValue]  # the checker as it was written (its kind and what it expects)
    output: str | None
    verdict: VerdictName
    reason: str | None = None
    error_kind: str | None = None
    error_message: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_source: str | None = None
    finish_reason: str | None = None


def read_items(run_dir: Path) -> list[ItemResult]:
    path = Path(run_dir) / ITEMS
    out = []
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{run_dir}: cannot read {ITEMS} ({exc.strerror})") from None
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(ItemResult.model_validate(orjson.loads(line)))
        except (orjson.JSONDecodeError, ValidationError):
            # A run killed mid-write leaves a partial last line: the lines before it still count.
            if lineno == len(raw.splitlines()):
                break
            raise UsageError(f"{path}:{lineno}: not an item record") from None
    return out


def load_quality(run_dir: str | Path) -> QualityResult | None:
    """The quality section of a run directory, or None when it has none.

    For `compare` and the HTML report: a directory without quality.json is not an error.
    """
    path = Path(run_dir) / QUALITY
    if not path.is_file():
        return None
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UsageError(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != "quality":
        return None
    if data.get("schema_version", 0) > QUALITY_SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {data['schema_version']} is newer than this tokenrace reads")
    try:
        return QualityResult.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"{path}: not a quality result ({exc.errors()[0]['msg']})") from None
