"""A tokenrace run as llm-d's Benchmark Report v0.2.1, the format llm-d-benchmark and inference-perf
exchange (`tokenrace export --format br`): one report for a run, one per step of a sweep or a profile
sharing one experiment id.

The report (model/benchmark_report.py) carries statistics, not requests: tokenrace's own statistics as
they are (docs/metrics.md), in ms and ms/token, and the percentiles only the format names (p0.1, p1,
p5, p10, p25, p75, p99.9) from the same requests' records. What the run does not know is left out.
runs/importers.py reads these files back. The mapping is in docs/metrics.md ("llm-d Benchmark Report").
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np
import orjson
import yaml
from pydantic import JsonValue

from tokenrace import __version__
from tokenrace.errors import UsageError
from tokenrace.model.benchmark_report import (
    Aggregate,
    AggregateLatency,
    AggregateRequests,
    AggregateThroughput,
    BenchmarkReport,
    Component,
    ComponentMetadata,
    ComponentNative,
    GenericComponent,
    Load,
    LoadMetadata,
    LoadNative,
    LoadStandardized,
    MultiTurn,
    RequestPerformance,
    Results,
    RunInfo,
    RunTime,
    Scenario,
    SequenceLength,
    Statistics,
    Unit,
)
from tokenrace.model.manifest import Manifest
from tokenrace.model.records import RequestRecord
from tokenrace.model.stats import Stats
from tokenrace.model.summary import Summary
from tokenrace.runs.run import Run
from tokenrace.stats import describe

TOOL = "tokenrace"
# An imported run's load generator under the name llm-d-benchmark gives it (its WorkloadGenerator).
GENERATORS = {"vllm bench serve": "vllm-benchmark", "aiperf": "aiperf"}
UNKNOWN_VERSION = "unknown"  # the format requires a version; an imported file did not give one
SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}
# Percentiles the format names beyond ours (p50, p90, p95, p99), from the records.
EXTRA_PERCENTILES = {"p0p1": 0.1, "p1": 1.0, "p5": 5.0, "p10": 10.0, "p25": 25.0, "p75": 75.0, "p99p9": 99.9}
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/llm-d/llm-d-benchmark#tokenrace")
# The manifest's keys that say what the load was: the load's native config in the report, and the
# manifest of a tokenrace report read back.
NATIVE_KEYS = frozenset({"model", "endpoint", "provider", "prompts", "workload", "settings"})


def reports(run: Run) -> list[tuple[str | None, BenchmarkReport]]:
    """One report for a single run; one per step of a sweep or a profile, sharing one experiment id."""
    eid = _experiment_id(run)
    if run.kind == "run":
        return [(None, report(run, eid))]
    return [(name, report(step, eid, stage=i, sweep=run)) for i, (name, step) in enumerate(run.steps)]


def write_reports(run: Run, output: Path) -> list[Path]:
    """Write the reports, JSON or YAML by `output`'s extension; a sweep's steps go to
    `<stem>-<step><suffix>` beside it. Returns the paths written."""
    fmt = SUFFIXES.get(output.suffix.lower())
    if fmt is None:
        raise UsageError(f"{output}: the file name must end in .json, .yaml or .yml (the report's format)")
    written = []
    for step, doc in reports(run):
        path = output if step is None else output.with_name(f"{output.stem}-{step}{output.suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = doc.model_dump(mode="json", exclude_none=True)
        if fmt == "json":
            path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
        else:
            path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        written.append(path)
    return written


def report(run: Run, eid: str, stage: int = 0, sweep: Run | None = None) -> BenchmarkReport:
    """One run's Benchmark Report v0.2.1."""
    s, m = run.summary, run.manifest
    stack, load = _stack(m), _load(s, m, stage)
    aggregate = _aggregate(s, run.measured_ok())
    return BenchmarkReport(
        run=_run_info(run, eid, sweep),
        scenario=Scenario(stack=stack, load=load) if stack or load else None,
        results=Results(request_performance=RequestPerformance(aggregate=aggregate)),
    )


def _experiment_id(run: Run) -> str:
    return uuid.uuid5(NAMESPACE, f"{run.directory.resolve()}|{run.manifest.started_at}").hex


def _run_info(run: Run, eid: str, sweep: Run | None) -> RunInfo:
    m = run.manifest
    uid = uuid.uuid5(NAMESPACE, f"{run.directory.resolve()}|{m.started_at}|report").hex
    label = m.settings.label or (sweep.name if sweep is not None else run.directory.name)
    described = f"{m.model} [{label}]" if m.model else label
    if sweep is not None:
        described += f", step {run.directory.name}"
    start, end = _timestamp(m.started_at), _timestamp(m.finished_at)
    time = RunTime(start=start, end=end, duration=_duration(start, end)) if start or end else None
    return RunInfo(uid=uid, eid=eid, time=time, description=described)


def _timestamp(value: str | None) -> str | None:
    """An ISO-8601 time with its offset (a naive one is taken as UTC, as the manifest writes it)."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).isoformat()


def _duration(start: str | None, end: str | None) -> str | None:
    if start is None or end is None:
        return None
    seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    return f"PT{seconds:.6f}S" if seconds >= 0 else None


def _config_id(config: JsonValue) -> str:
    return hashlib.md5(orjson.dumps(config, option=orjson.OPT_SORT_KEYS), usedforsecurity=False).hexdigest()


def _stack(m: Manifest) -> list[Component] | None:
    """The server as one generic component, when its engine and version are known."""
    engine = m.engine.engine if m.engine else m.server.engine if m.server else None
    version = m.engine.version if m.engine else m.server.engine_version if m.server else None
    if not engine or not version:
        return None
    command: list[JsonValue] | None = list(m.engine.launch_command) if m.engine and m.engine.launch_command else None
    native = ComponentNative(args={"command": command} if command else None)
    standardized = GenericComponent(tool=engine, tool_version=version, model=m.model)
    config_id = _config_id([standardized.model_dump(mode="json"), native.model_dump(mode="json")])
    description = f"endpoint {m.endpoint}" if m.endpoint else None
    return [Component(metadata=ComponentMetadata(label=engine, cfg_id=config_id, description=description),
                      standardized=standardized, native=native)]  # fmt: skip


def _sequence(setting: Sequence[float] | None, measured: Stats, cap: int | None = None) -> SequenceLength | None:
    """A sequence length: the run's setting (mean, standard deviation), else max_tokens as a fixed cap,
    else what was measured (distribution `other`)."""
    if setting is not None:
        mean, std = float(setting[0]), float(setting[1])
        if std == 0:
            return SequenceLength(distribution="fixed", value=int(mean) if mean.is_integer() else mean)
        return SequenceLength(distribution="gaussian", value=mean, std_dev=std)
    if cap is not None:
        return SequenceLength(distribution="fixed", value=cap)
    if measured.mean is None:
        return None
    return SequenceLength(
        distribution="other",
        value=measured.mean,
        std_dev=measured.std,
        min=None if measured.min is None else round(measured.min),
        max=None if not measured.max else round(measured.max),  # the format's max is at least 1
    )


def _load(s: Summary, m: Manifest, stage: int) -> Load | None:
    settings = m.settings
    prompts, load, request = settings.prompts, settings.load, settings.request
    isl = _sequence(prompts.input_tokens if prompts else None, s.metrics.prompt_tokens)
    if isl is None:  # the format requires it: without a prompt length there is no load section
        return None
    osl = _sequence(prompts.output_tokens if prompts else None, Stats(), request.max_tokens if request else None)
    turns = settings.workload.turns if settings.workload else None
    multi_turn = None
    if turns is not None and turns.mean is not None:
        max_turns = SequenceLength(distribution="gaussian", value=turns.mean, std_dev=turns.std) if turns.std else (
            SequenceLength(distribution="fixed", value=turns.mean))  # fmt: skip
        multi_turn = MultiTurn(max_turns=max_turns)
    rate = load.rate if load and load.rate else None
    concurrency = load.concurrency if load and rate is None and load.concurrency else None
    native = m.model_dump(mode="json", include=set(NATIVE_KEYS), exclude_none=True)
    return Load(
        metadata=LoadMetadata(cfg_id=_config_id(native), description=m.prompts.name),
        standardized=LoadStandardized(
            tool=GENERATORS.get(m.tool, m.tool) if m.imported else TOOL,
            tool_version=m.version or (UNKNOWN_VERSION if m.imported else __version__),
            parallelism=m.workers.count if m.workers and m.workers.count >= 1 else 1,
            source=_source(m),
            stage=stage,
            input_seq_len=isl,
            output_seq_len=osl,
            multi_turn=multi_turn,
            rate_qps=float(rate) if rate else None,
            concurrency=concurrency,
        ),
        native=LoadNative(config=native),
    )


def _source(m: Manifest) -> Literal["random", "sampled", "unknown"]:
    """random: prompts made up to a length; sampled: prompts from a file, a text or a dataset."""
    prompts = m.settings.prompts
    if prompts is not None and (prompts.file or prompts.text):
        return "sampled"
    if prompts is not None and prompts.input_tokens is not None:
        return "random"
    return "sampled" if m.prompts.name else "unknown"


def _aggregate(s: Summary, ok: list[RequestRecord]) -> Aggregate:
    counts, metrics = s.requests, s.metrics
    requests = AggregateRequests(
        # The format counts every request sent; tokenrace leaves cancelled ones out of its total.
        total=counts.total + counts.cancelled,
        failures=counts.failed,
        incomplete=counts.cancelled,
        input_length=_statistics(metrics.prompt_tokens, "count", [r.prompt_tokens for r in ok]),
        output_length=_statistics(metrics.output_tokens, "count", [r.output_tokens for r in ok]),
    )
    normalized = [r.e2e_ms / r.output_tokens for r in ok if r.e2e_ms is not None and r.output_tokens]
    latency = AggregateLatency(
        time_to_first_token=_statistics(metrics.ttft_ms, "ms", [r.ttft_ms for r in ok]),
        time_per_output_token=_statistics(metrics.tpot_ms, "ms/token", [r.tpot_ms for r in ok]),
        inter_token_latency=_statistics(metrics.itl_chunk_ms, "ms/token", _gaps(ok)),
        request_latency=_statistics(metrics.e2e_ms, "ms", [r.e2e_ms for r in ok]),
        normalized_time_per_output_token=_statistics_of(normalized, "ms/token"),
    )
    return Aggregate(
        requests=requests,
        latency=latency if latency.model_dump(exclude_none=True) else None,
        throughput=_throughput(s),
    )


def _gaps(ok: list[RequestRecord]) -> list[float]:
    return [float(g) for r in ok for g in np.diff(np.asarray(r.chunk_offsets_ms, dtype=float))]


def _statistics(stats: Stats, unit: Unit, values: Sequence[float | None]) -> Statistics | None:
    """Our statistics (docs/metrics.md) in the format's names; the percentiles only the format names
    come from the same values in the records, when the run has them all."""
    if stats.mean is None:
        return None
    present = [float(v) for v in values if v is not None]
    extra = _percentiles(present) if len(present) == stats.count else {}
    return Statistics(
        units=unit,
        mean=stats.mean,
        stddev=stats.std,
        min=stats.min,
        p50=stats.p50,
        p90=stats.p90,
        p95=stats.p95,
        p99=stats.p99,
        max=stats.max,
        **extra,
    )


def _statistics_of(values: Sequence[float], unit: Unit) -> Statistics | None:
    """A distribution only the format asks for, from the records, described as tokenrace's are."""
    return _statistics(describe(values), unit, values)


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    found = np.percentile(np.asarray(values, dtype=float), list(EXTRA_PERCENTILES.values()))
    return {k: _r4(v) for k, v in zip(EXTRA_PERCENTILES, found, strict=True)}


def _throughput(s: Summary) -> AggregateThroughput | None:
    """Rates over the run's window: output tokens, requests, and prompt tokens (Σ prompt tokens of the
    succeeded requests ÷ the window)."""
    tp, prompt = s.throughput, s.metrics.prompt_tokens
    input_rate = None
    if tp.window_s and prompt.mean is not None and prompt.count:
        input_rate = round(prompt.mean * prompt.count / tp.window_s, 4)
    output_rate = tp.output_tokens_per_s
    total = round(input_rate + output_rate, 4) if input_rate is not None and output_rate is not None else None
    out = AggregateThroughput(
        input_token_rate=_rate(input_rate, "tokens/s"),
        output_token_rate=_rate(output_rate, "tokens/s"),
        total_token_rate=_rate(total, "tokens/s"),
        request_rate=_rate(tp.requests_per_s, "queries/s"),
    )
    return out if out.model_dump(exclude_none=True) else None


def _rate(value: float | None, unit: Unit) -> Statistics | None:
    return None if value is None else Statistics(units=unit, mean=value)


def _r4(v: float | np.floating) -> float:
    return round(float(v), 4)
