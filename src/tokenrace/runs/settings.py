"""A run's settings: what `BenchSession` is asked to do, and the form manifest.json keeps.

Every command that measures (bench, sweep, profile, claim, the quality pass beside a run) builds a
`BenchSettings`; the session, the API checks (`runs/api_fit.py`), the sweep and the claim battery
read it. It lives apart from the session so that none of them imports the orchestrator to name it.

Each setting is declared once, as a field of these dataclasses and of the lower layers' own types
they hold. manifest.json's form of them (`model.settings.RunSettings`: every field may be absent) is
generated from these declarations by `scripts/gen_settings_model.py`, following `SAVED_NAMES` and
`SAVED_FIELDS` below; `saved_form` turns a run's settings into that form by the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.client.request import RequestOptions
from tokenrace.client.transport import Timeouts
from tokenrace.figures.cost import CostSpec, GpuCost, Price
from tokenrace.figures.efficiency import EfficiencySpec
from tokenrace.figures.slo import Slo, slo_limits
from tokenrace.load.runner import Load
from tokenrace.load.shapes import Stage
from tokenrace.load.workers import WorkersSpec
from tokenrace.load.workload import WorkloadSpec
from tokenrace.load.workloads.images import ImageSpec
from tokenrace.load.workloads.sessions import TurnsSpec
from tokenrace.model.engine import EngineRecord
from tokenrace.model.settings import RunSettings
from tokenrace.redact import hidden_headers, redact_fields, redact_headers, secret_values
from tokenrace.stats import CONFIDENCE


@dataclass(slots=True)
class PromptSpec:
    text: str | None = None
    file: str | None = None
    input_tokens: tuple[int, float] | None = None
    output_tokens: tuple[int, float] | None = None
    count: int = 64
    batch_size: int | None = None  # embeddings: inputs per request (None: 1)
    documents: int | None = None  # rerank: documents per request (None: DEFAULT_DOCUMENTS)
    content: str | None = None  # natural | copy | random | all: what the model is asked to write


@dataclass(slots=True)
class BenchSettings:
    endpoint: ResolvedEndpoint | None  # None: the embedded engine supplies one
    model: str | None = None
    request: RequestOptions = field(default_factory=RequestOptions)
    timeouts: Timeouts = field(default_factory=Timeouts)
    load: Load = field(default_factory=Load)
    prompts: PromptSpec = field(default_factory=PromptSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    tokenizer: str | None = None
    slo: Slo | None = None  # goodput's per-request SLOs (--slo)
    output: Path | None = None
    label: str | None = None
    max_error_rate: float | None = None  # None: fail only when every request failed
    confidence: float = CONFIDENCE  # of every bound the run's figures carry (docs/metrics.md, "Intervals")
    engine: EngineRecord | None = None  # what launched the server, when tokenrace did
    efficiency: EfficiencySpec | None = None  # hardware + model: report % of the speed of light
    cost: CostSpec | None = None  # --price or --gpu-hour-cost: cost beside speed
    monitor: bool = False  # sample GPU/system/server metrics into timeseries.jsonl
    monitor_interval_s: float = 1.0
    metrics_url: str | None = None  # the server's Prometheus /metrics (default: discovered)
    workers: WorkersSpec | None = None  # spread the sends over worker processes or Ray actors
    secret_headers: tuple[str, ...] = ()  # extra headers whose values are secret whatever their names (from env:)
    dcgm_url: str | None = None  # a DCGM exporter's /metrics: the remote server's GPU energy
    profile: str | None = None  # --profile: a reference profile (load/profiles.py); its figures are added

    def secrets(self) -> list[str]:
        """Every secret value these settings hold: scrubbed from every file, log line and message."""
        key = self.endpoint.api_key if self.endpoint else None
        marked = frozenset(self.secret_headers)
        return [v for v in (key, *secret_values(self.request.extra_headers, self.request.extra_body, marked)) if v]

    def saved(self) -> RunSettings:
        """As manifest.json keeps them (`saved_form`), secrets hidden: the endpoint's key is never
        kept (where it came from is), and the headers `secret_headers` marks are hidden beside those
        whose names look secret (`RunSettings` hides those and secret body fields itself)."""
        headers = redact_headers(self.request.extra_headers, frozenset(self.secret_headers))
        hidden = replace(self, request=replace(self.request, extra_headers=headers))
        return RunSettings.model_validate(saved_form(hidden))


@dataclass(frozen=True, slots=True)
class SavedField:
    """How manifest.json keeps a field when not as itself."""

    omit: bool = False  # never kept (a secret)
    name: str | None = None  # kept under this name
    as_type: str | None = None  # kept as this type (the generated model's annotation)
    convert: Callable[[Any], object] | None = None  # the kept value, from a value that is not None
    check: Callable[[Any], Any] | None = None  # applied to the value whenever the model is built


# Each settings class and the name of its saved form (the schema's names, kept from before).
SAVED_NAMES: dict[type, str] = {
    BenchSettings: "RunSettings",
    ResolvedEndpoint: "EndpointSettings",
    RequestOptions: "RequestSettings",
    Timeouts: "TimeoutSettings",
    Stage: "StageSettings",
    Load: "LoadSettings",
    PromptSpec: "PromptSettings",
    TurnsSpec: "TurnsSettings",
    ImageSpec: "ImageSettings",
    WorkloadSpec: "WorkloadSettings",
    EfficiencySpec: "EfficiencySettings",
    Price: "PriceSettings",
    GpuCost: "GpuCostSettings",
    CostSpec: "CostSettings",
    WorkersSpec: "WorkersSettings",
}
# The fields not kept as themselves. Every other field is kept under its name, as its type, and may
# be absent when read (a file of an older version, a run imported from another tool).
SAVED_FIELDS: dict[tuple[type, str], SavedField] = {
    (ResolvedEndpoint, "api_key"): SavedField(omit=True),
    (ResolvedEndpoint, "key_source"): SavedField(name="api_key_from"),  # the variable's (or flag's) name
    (BenchSettings, "slo"): SavedField(as_type="dict[str, Number]", convert=slo_limits),  # {"ttft_ms": 500.0}
    # (mean, standard deviation): a run's mean is a whole number, another tool's may not be.
    (PromptSpec, "input_tokens"): SavedField(as_type="tuple[Number, Number]"),
    (PromptSpec, "output_tokens"): SavedField(as_type="tuple[Number, Number]"),
    # The user's own JSON, kept as given.
    (RequestOptions, "tools"): SavedField(as_type="list[JsonValue]"),
    (RequestOptions, "tool_choice"): SavedField(as_type="JsonValue"),
    # Whoever builds a manifest (a run, an importer), secret-looking header and body values never reach
    # the file; the run also scrubs every value it knows is secret (BenchSettings.secrets).
    (RequestOptions, "extra_headers"): SavedField(check=hidden_headers),
    (RequestOptions, "extra_body"): SavedField(check=redact_fields),
}
_AS_ITSELF = SavedField()


def saved_form(value: object) -> object:
    """A settings value as manifest.json keeps it (before `RunSettings` reads it): dataclasses as
    dicts by `SAVED_FIELDS`, tuples as lists, paths as text; JSON values and models as they are."""
    if is_dataclass(value) and not isinstance(value, type):
        out: dict[str, object] = {}
        for f in fields(value):
            how = SAVED_FIELDS.get((type(value), f.name), _AS_ITSELF)
            if how.omit:
                continue
            v = getattr(value, f.name)
            if how.convert is not None and v is not None:
                v = how.convert(v)
            out[how.name or f.name] = saved_form(v)
        return out
    if isinstance(value, (tuple, list)):
        return [saved_form(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
