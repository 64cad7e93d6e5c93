"""manifest.json: what was run, against what, and how it was measured."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tokenrace.model.base import JsonObject, _Model
from tokenrace.model.environment import Environment
from tokenrace.model.monitor import MonitorSettings
from tokenrace.redact import HIDDEN, redact_fields, redact_headers


class PromptsInfo(_Model):
    name: str | None = None
    count: int | None = None
    sizing: str | None = None
    cache_bust: bool | None = None


class Workload(_Model):
    """What was sent: independent prompts, sessions or a trace, and whether prompts were busted."""

    kind: Literal["prompts", "sessions", "trace"]
    source: str | None = None
    cache_bust: bool | None = None
    nonce: str | None = None  # the run's bust tags are made from it; unique per run
    notes: list[str] = Field(default_factory=list)


class WorkerInfo(_Model):
    """One sending worker: where it ran, its clock against the parent's, what it sent, how it ended."""

    index: int
    pid: int | None = None
    host: str | None = None
    node: str | None = None  # the Ray node id, on a Ray cluster
    clock_offset_ns: int | None = None  # the worker's perf_counter_ns() minus the parent's (min-RTT probe)
    clock_rtt_ns: int | None = None  # the round trip of that probe
    clock_error_ns: int | None = None  # the estimate is within ± this (half the round trip)
    clock_shared: bool | None = None  # the worker reads the parent's own clock (same kernel)
    clock_applied_ns: int | None = None  # subtracted from its stamps: 0 when the clock is shared
    requests: int | None = None  # requests handed to it
    died: str | None = None  # why it died mid-run, when it did


class WorkersInfo(_Model):
    """How the load's sends were spread: over worker processes, Ray actors, or this one process."""

    kind: Literal["process", "processes", "ray"]
    count: int
    requested: str  # what --workers said: a number or "auto"
    reason: str | None = None  # why `auto` chose `count`
    lead_ms: float | None = None  # open loop: sends are handed out this long before their time
    start_method: str | None = None  # processes: multiprocessing's start method
    ray_address: str | None = None
    lost_requests: int = 0  # in flight on a worker that died (records with error kind worker_lost)
    workers: list[WorkerInfo] = Field(default_factory=list)


class ImportedFrom(_Model):
    """Where an imported run came from (runs/importers.py): the other tool's file, and its own totals."""

    source_file: str | None = None
    imported_at: str | None = None
    imported_by: str | None = None
    aggregate_file: str | None = None  # AIPerf: the aggregate JSON read beside the records
    vllm_result: dict[str, float | int | str | None] | None = None  # vLLM's own totals, for comparison


_IMPORT_KEYS = tuple(ImportedFrom.model_fields)


class Manifest(_Model):
    """manifest.json: what was run, against what, and how it was measured. Secrets never appear."""

    schema_version: int = 0
    tool: str = "tokenrace"
    version: str | None = None
    command: list[str] | None = None
    settings: JsonObject = Field(default_factory=dict)
    endpoint: str | None = None
    provider: str | None = None
    model: str | None = None
    models_answer: Any = None
    server_headers: dict[str, str] | None = None
    prompts: PromptsInfo = Field(default_factory=PromptsInfo)
    tokenizer: str | None = None
    arrival_clock: Literal["socket", "reader"] | None = None
    engine: JsonObject | None = None
    started_at: str | None = None
    t0_perf_counter_ns: int | None = None
    finished_at: str | None = None
    interrupted: bool | None = None
    environment: Environment | None = None
    server: JsonObject | None = None
    monitor: MonitorSettings | None = None
    imported: ImportedFrom | None = None
    workload: Workload | None = None
    workers: WorkersInfo | None = None

    @model_validator(mode="before")
    @classmethod
    def _imported_together(cls, data: Any) -> Any:
        """Imported runs before schema version 2 kept source_file, imported_at, ... at the top."""
        if not isinstance(data, dict) or not any(k in data for k in _IMPORT_KEYS):
            return data
        moved = {k: data[k] for k in _IMPORT_KEYS if k in data}
        rest = {k: v for k, v in data.items() if k not in _IMPORT_KEYS}
        return {**rest, "imported": {**(rest.get("imported") or {}), **moved}}

    # Whoever builds a manifest, the values of secret-looking headers and body fields never reach
    # the file (the run also scrubs every value it knows is secret: see BenchSettings.secrets).
    @field_validator("settings")
    @classmethod
    def _hide_request_secrets(cls, settings: JsonObject) -> JsonObject:
        request = settings.get("request")
        if not isinstance(request, dict):
            return settings
        hidden = dict(request)
        if isinstance(request.get("extra_headers"), dict):
            hidden["extra_headers"] = redact_headers(request["extra_headers"])
        if request.get("extra_body") is not None:
            hidden["extra_body"] = redact_fields(request["extra_body"])
        return {**settings, "request": hidden}

    @field_validator("server_headers")
    @classmethod
    def _hide_server_secrets(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        # Response headers speak of tokens openly (x-ratelimit-remaining-tokens): only cookies hide.
        if headers is None:
            return None
        return {k: HIDDEN if k.lower() in ("set-cookie", "cookie") else v for k, v in headers.items()}
