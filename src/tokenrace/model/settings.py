"""manifest.json's `settings`: the run's settings as saved (`runs.settings.BenchSettings.saved()`, with
the endpoint's key replaced by where it came from and secret header and body values hidden).

Below this docstring, generated from the settings' own declarations (runs/settings.py and the
types it holds) by `python scripts/gen_settings_model.py`: edit those, not this. Every field may be
missing: files of older versions and runs imported from other tools (runs/importers.py) hold only
part of it. Numbers keep the JSON type they were given in (`Number`): a whole rate of 2 stays 2. The
request's body, tools and response schema are the user's own JSON, sent as given.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, JsonValue

from tokenrace.model.base import _Model
from tokenrace.model.engine import EngineRecord
from tokenrace.redact import hidden_headers, redact_fields

Number = float | int  # as the user gave it


class EndpointSettings(_Model):
    base_url: str | None = None
    api_key_from: str | None = None
    provider: str | None = None


class RequestSettings(_Model):
    api: str | None = None
    stream: bool | None = None
    include_usage: bool | None = None
    max_tokens: int | None = None
    temperature: Number | None = None
    seed: int | None = None
    extra_body: Annotated[dict[str, JsonValue] | None, AfterValidator(redact_fields)] = None
    extra_headers: Annotated[dict[str, str] | None, AfterValidator(hidden_headers)] = None
    rerank_format: str | None = None
    tools: list[JsonValue] | None = None
    tool_choice: JsonValue = None
    response_schema: dict[str, JsonValue] | bool | None = None
    response_schema_name: str | None = None


class TimeoutSettings(_Model):
    connect: Number | None = None
    first_byte: Number | None = None
    idle: Number | None = None
    total: Number | None = None


class StageSettings(_Model):
    duration_s: Number | None = None
    value: Number | None = None


class LoadSettings(_Model):
    concurrency: int | None = None
    rate: Number | None = None
    arrival: str | None = None
    burstiness: Number | None = None
    max_concurrency: int | None = None
    requests: int | None = None
    duration_s: Number | None = None
    warmup: int | None = None
    cold: bool | None = None
    seed: int | None = None
    keep_awake: bool | None = None
    ramp_s: Number | None = None
    stages: list[StageSettings] | None = None
    stages_kind: str | None = None
    cancel_rate: Number | None = None
    probe_rate: Number | None = None
    saturation_stop: bool | None = None


class PromptSettings(_Model):
    text: str | None = None
    file: str | None = None
    input_tokens: tuple[Number, Number] | None = None
    output_tokens: tuple[Number, Number] | None = None
    count: int | None = None
    batch_size: int | None = None
    documents: int | None = None
    content: str | None = None


class TurnsSettings(_Model):
    mean: Number | None = None
    std: Number | None = None


class ImageSettings(_Model):
    count: int | None = None
    sizes: list[tuple[int, int]] | None = None
    format: str | None = None
    share: Number | None = None
    directory: str | None = None


class WorkloadSettings(_Model):
    cache_bust: bool | None = None
    shared_prefix_tokens: int | None = None
    prefix_groups: int | None = None
    turns: TurnsSettings | None = None
    think_time_s: Number | None = None
    sessions_file: str | None = None
    skip_invalid_sessions: bool | None = None
    session_header: str | None = None
    trace_file: str | None = None
    trace_format: str | None = None
    trace_speed: Number | None = None
    trace_block_tokens: int | None = None
    images: ImageSettings | None = None


class EfficiencySettings(_Model):
    hardware: str | None = None
    model: str | None = None
    precision: str | None = None
    devices: int | None = None


class PriceSettings(_Model):
    input_per_m: Number | None = None
    output_per_m: Number | None = None
    source: str | None = None
    date: str | None = None


class GpuCostSettings(_Model):
    usd_per_gpu_hour: Number | None = None
    gpus: int | None = None


class CostSettings(_Model):
    price: PriceSettings | None = None
    gpu: GpuCostSettings | None = None


class WorkersSettings(_Model):
    count: int | None = None
    ray: str | None = None


class RunSettings(_Model):
    """What the run was asked to do, as saved in manifest.json."""

    endpoint: EndpointSettings | None = None
    model: str | None = None
    request: RequestSettings | None = None
    timeouts: TimeoutSettings | None = None
    load: LoadSettings | None = None
    prompts: PromptSettings | None = None
    workload: WorkloadSettings | None = None
    tokenizer: str | None = None
    slo: dict[str, Number] | None = None
    output: str | None = None
    label: str | None = None
    max_error_rate: Number | None = None
    confidence: Number | None = None
    engine: EngineRecord | None = None
    efficiency: EfficiencySettings | None = None
    cost: CostSettings | None = None
    monitor: bool | None = None
    monitor_interval_s: Number | None = None
    metrics_url: str | None = None
    workers: WorkersSettings | None = None
    secret_headers: list[str] | None = None
    dcgm_url: str | None = None
    profile: str | None = None
