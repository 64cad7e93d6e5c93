"""quality.json: a quality pass's accuracy per suite and overall, its speed, and how it was asked.

Filled by `quality/` (the runner and its scoring); the claim's quality pass reports the same scores.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue, with_config
from typing_extensions import TypedDict

from tokenrace.model.base import _Model

QUALITY_SCHEMA_VERSION = 1


class Accuracy(BaseModel):
    """Share of judged items answered right, with Wilson's 95 % interval; None when nothing was judged."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int


class Score(BaseModel):
    accuracy: Accuracy
    right: int
    wrong: int
    errors: int  # failed requests: not judged, not in `accuracy`
    errors_by_kind: dict[str, int]


class Speed(BaseModel):
    """From the item records (successful requests): medians per request, and output tokens over the
    summed request time (what one stream delivers; requests run one at a time by default)."""

    ttft_ms_p50: float | None
    tpot_ms_p50: float | None
    e2e_ms_p50: float | None
    output_tokens_per_s: float | None
    requests: int


@with_config({"extra": "allow"})
class QualityRunSettings(TypedDict, total=False):
    """How the items were asked. `samples` and `after` are there when the pass was asked with a count
    or after another command (bench, claim), so the file keeps exactly the keys it was written with."""

    seed: int
    temperature: float
    concurrency: int
    api: str
    suites: list[str]
    items: int
    api_key_from: str | None  # the variable the key came from, never the key
    extra_body: dict[str, JsonValue] | None  # the user's JSON merged into every request
    samples: int | None
    after: str  # "bench" or "claim": the command this pass followed


class ModelFile(_Model):
    path: str | None = None
    file_size_bytes: int | None = None
    sha256: str | None = None
    quantization: str | None = None


class Readiness(_Model):
    model: str | None = None
    health_s: float | None = None
    ready_s: float | None = None


class EngineInfo(_Model):
    """The engine tokenrace started for the pass (the embedded llama-server), as serve describes it."""

    engine: str | None = None
    version: str | None = None
    binary: str | None = None
    model_file: ModelFile | None = None
    threads: str | None = None
    parallel_slots: int | None = None
    ctx_size: int | None = None
    embeddings: bool | None = None
    launch_command: list[str] | None = None
    readiness: Readiness | None = None


class QualityResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schema_version: int = QUALITY_SCHEMA_VERSION
    kind: Literal["quality"] = "quality"
    created_at: str
    endpoint: str
    model: str
    settings: QualityRunSettings
    suites: dict[str, Score]
    overall: Score
    speed: Speed
    engine: EngineInfo | None = None
    interrupted: bool = False
