"""llm-d's Benchmark Report v0.2.1: the part of it tokenrace writes, typed.

The format is llm-d-benchmark's (`llmdbenchmark/analysis/benchmark_report/schema_v0_2.py` and
`schema_v0_2_1.py`, Apache-2.0); these models keep its field names and, like its own, refuse a key it
does not define. Every statistic is optional: what a run does not know is left out, never 0. Its JSON
Schema (`br_v0_2_1_json_schema.json`) is kept under tests/fixtures, and the tests validate what
tokenrace writes against it. The mapping from tokenrace's figures is in docs/metrics.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue

VERSION = "0.2.1"
COMPONENT_SCHEMA = "0.0.1"  # the schema version of a component's and a workload's description

TimeUnit = Literal["ms", "s"]
GenerationLatencyUnit = Literal["ms/token", "s/token"]
# The format's units, by the kind of quantity (its base.py's UNITS_* lists).
Unit = Literal["count", "ms", "s", "ms/token", "s/token", "tokens/s", "queries/s"]


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Statistics(_Report):
    """One figure's distribution: its unit and mean, and whatever else is known."""

    units: Unit
    mean: float
    stddev: float | None = None
    min: float | None = None
    p0p1: float | None = None
    p1: float | None = None
    p5: float | None = None
    p10: float | None = None
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p99p9: float | None = None
    max: float | None = None


class SequenceLength(_Report):
    distribution: Literal["fixed", "gaussian", "uniform", "other"]
    value: int | float
    std_dev: float | None = None
    min: int | None = None
    max: int | None = None  # at least 1 in the format


class MultiTurn(_Report):
    enabled: bool = True
    max_turns: SequenceLength | None = None


class LoadStandardized(_Report):
    tool: str
    tool_version: str
    parallelism: int = 1  # workload generators (tokenrace: worker processes)
    source: Literal["random", "sampled", "unknown"]
    stage: int = 0  # a sweep's step, from 0
    input_seq_len: SequenceLength
    output_seq_len: SequenceLength | None = None
    multi_turn: MultiTurn | None = None
    rate_qps: float | None = None  # above 0
    concurrency: int | None = None  # at least 1


class LoadMetadata(_Report):
    schema_version: str = COMPONENT_SCHEMA
    cfg_id: str | None = None
    description: str | None = None


class LoadNative(_Report):
    config: JsonValue = None  # tokenrace's own description of the load: a slice of its manifest


class Load(_Report):
    metadata: LoadMetadata
    standardized: LoadStandardized
    native: LoadNative


class ComponentMetadata(_Report):
    schema_version: str = COMPONENT_SCHEMA
    label: str
    cfg_id: str
    description: str | None = None


class GenericComponent(_Report):
    """The format's `generic` component: kind, tool and version, and any other key."""

    kind: Literal["generic"] = "generic"
    tool: str
    tool_version: str
    model: str | None = None


class ComponentNative(_Report):
    args: dict[str, JsonValue] | None = None


class Component(_Report):
    metadata: ComponentMetadata
    standardized: GenericComponent
    native: ComponentNative


class RunTime(_Report):
    start: str | None = None  # ISO-8601 with its offset
    end: str | None = None
    duration: str | None = None  # ISO-8601 duration, PT…S


class RunInfo(_Report):
    uid: str  # this report
    eid: str | None = None  # the experiment: shared by a sweep's steps
    time: RunTime | None = None
    description: str | None = None


class Scenario(_Report):
    stack: list[Component] | None = None
    load: Load | None = None


class AggregateRequests(_Report):
    total: int
    failures: int | None = None
    incomplete: int | None = None
    input_length: Statistics | None = None
    output_length: Statistics | None = None


class AggregateLatency(_Report):
    time_to_first_token: Statistics | None = None
    normalized_time_per_output_token: Statistics | None = None
    time_per_output_token: Statistics | None = None
    inter_token_latency: Statistics | None = None
    request_latency: Statistics | None = None


class AggregateThroughput(_Report):
    input_token_rate: Statistics | None = None
    output_token_rate: Statistics | None = None
    total_token_rate: Statistics | None = None
    request_rate: Statistics | None = None


class Aggregate(_Report):
    requests: AggregateRequests | None = None
    latency: AggregateLatency | None = None
    throughput: AggregateThroughput | None = None


class RequestPerformance(_Report):
    aggregate: Aggregate | None = None


class Results(_Report):
    request_performance: RequestPerformance | None = None


class BenchmarkReport(_Report):
    version: str = VERSION
    run: RunInfo
    scenario: Scenario | None = None
    results: Results
