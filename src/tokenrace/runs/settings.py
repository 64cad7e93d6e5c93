"""A run's settings: what `BenchSession` is asked to do, and the form manifest.json keeps.

Every command that measures (bench, sweep, profile, claim, the quality pass beside a run) builds a
`BenchSettings`; the session, the API checks (`runs/api_fit.py`), the sweep and the claim battery
read it. It lives apart from the session so that none of them imports the orchestrator to name it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.client.request import RequestOptions
from tokenrace.client.transport import Timeouts
from tokenrace.figures.cost import CostSpec
from tokenrace.figures.efficiency import EfficiencySpec
from tokenrace.figures.slo import Slo, slo_limits
from tokenrace.load.runner import Load
from tokenrace.load.workers import WorkersSpec
from tokenrace.load.workload import WorkloadSpec
from tokenrace.model.engine import EngineRecord
from tokenrace.model.settings import RunSettings
from tokenrace.redact import redact_fields, redact_headers, secret_values
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
        """As manifest.json keeps them: the endpoint's key replaced by where it came from, secret
        header and body values hidden, the SLOs as their limits in ms."""
        d = asdict(self)
        e = self.endpoint
        d["endpoint"] = {
            "base_url": e.base_url if e else None,
            "provider": e.provider if e else None,
            "api_key_from": e.key_source if e else None,  # the variable's name, never the key
        }
        d["slo"] = slo_limits(self.slo) if self.slo else None
        d["output"] = str(self.output) if self.output else None
        d["request"]["extra_headers"] = redact_headers(self.request.extra_headers, frozenset(self.secret_headers))
        d["request"]["extra_body"] = redact_fields(self.request.extra_body)
        return RunSettings.model_validate(d)
