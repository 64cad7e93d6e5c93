"""llm-d's Benchmark Report v0.2.1: tokenrace runs exported, validated against the published JSON Schema,
and read back (ours and llm-d-benchmark's own example) so that `compare` puts them side by side."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from tests.conftest import in_process
from tests.sweep.helpers import bench

from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.client.request import RequestOptions
from tokenrace.errors import UsageError
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.load.runner import Load
from tokenrace.report.compare import compare
from tokenrace.runs.benchmark_report import reports, write_reports
from tokenrace.runs.importers import detect, from_benchmark_report, import_to_dir
from tokenrace.runs.reader import load
from tokenrace.runs.session import BenchSession
from tokenrace.runs.settings import BenchSettings
from tokenrace.sweep.runner import SweepPlan, run_sweep

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "imports" / "benchmark_report"
SCHEMA = json.loads((FIXTURES / "br_v0_2_1_json_schema.json").read_text())
EXAMPLE = FIXTURES / "br_v0_2_1_example.yaml"

# The units each field may take: the pydantic validators of llm-d-benchmark's model (base.py's UNITS_*
# lists, checked in schema_v0_2.py and schema_v0_2_1.py), which the JSON Schema cannot express.
TIME, GEN_LATENCY, QUANTITY = {"ms", "s"}, {"ms/token", "s/token"}, {"count", "pixels"}
UNIT_RULES = {
    "latency.time_to_first_token": TIME,
    "latency.request_latency": TIME,
    "latency.time_per_output_token": GEN_LATENCY,
    "latency.inter_token_latency": GEN_LATENCY,
    "latency.normalized_time_per_output_token": GEN_LATENCY,
    "requests.input_length": QUANTITY,
    "requests.output_length": QUANTITY,
    "throughput.input_token_rate": {"tokens/s"},
    "throughput.output_token_rate": {"tokens/s"},
    "throughput.total_token_rate": {"tokens/s"},
    "throughput.request_rate": {"queries/s"},
}


def valid(doc: dict[str, Any]) -> dict[str, Any]:
    """The report against the published schema, and each figure's unit against the model's rules."""
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    aggregate: dict[str, Any] = doc["results"]["request_performance"]["aggregate"]
    for path, allowed in UNIT_RULES.items():
        section, name = path.split(".")
        stat = aggregate.get(section, {}).get(name)
        if stat is not None:
            assert stat["units"] in allowed, path
    return aggregate


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServerThread]:
    with FakeServerThread({"ttft_ms": 15, "itl_ms": 5, "output_tokens": 12, "jitter_ms": 1}) as srv:
        yield srv


@pytest.fixture(scope="module")
def run_dir(server: FakeServerThread, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("br")
    return bench(server.base_url, out / "run", label="fast", requests=30, concurrency=2).directory


def test_a_run_exports_a_valid_report_in_our_units(run_dir: Path, tmp_path: Path) -> None:
    run = load(run_dir)
    (path,) = write_reports(run, tmp_path / "report.json")
    doc = json.loads(path.read_text())
    agg = valid(doc)
    s = run.summary
    assert doc["version"] == "0.2.1" and doc["run"]["uid"] and doc["run"]["eid"]
    ttft = agg["latency"]["time_to_first_token"]
    assert ttft["units"] == "ms" and ttft["p50"] == s.metrics.ttft_ms.p50 and ttft["max"] == s.metrics.ttft_ms.max
    # The percentiles only the format names come from the same requests: ordered among ours.
    assert ttft["min"] <= ttft["p5"] <= ttft["p25"] <= ttft["p50"] <= ttft["p75"] <= ttft["p90"]
    assert agg["latency"]["time_per_output_token"]["mean"] == s.metrics.tpot_ms.mean
    assert agg["latency"]["inter_token_latency"]["p50"] == s.metrics.itl_chunk_ms.p50
    assert agg["requests"] == agg["requests"] | {"total": 30, "failures": 0, "incomplete": 0}
    assert agg["requests"]["output_length"]["mean"] == s.metrics.output_tokens.mean
    assert agg["throughput"]["output_token_rate"] == {"units": "tokens/s", "mean": s.throughput.output_tokens_per_s}
    ntpot = agg["latency"]["normalized_time_per_output_token"]
    assert ntpot["units"] == "ms/token" and ntpot["mean"] == pytest.approx(s.metrics.e2e_ms.mean / 12, rel=0.05)
    load_std = doc["scenario"]["load"]["standardized"]
    assert load_std["tool"] == "tokenrace" and load_std["concurrency"] == 2 and "rate_qps" not in load_std
    assert load_std["output_seq_len"] == {"distribution": "fixed", "value": 16}


def test_yaml_holds_the_same_report(run_dir: Path, tmp_path: Path) -> None:
    run = load(run_dir)
    (j,) = write_reports(run, tmp_path / "r.json")
    (y,) = write_reports(run, tmp_path / "r.yaml")
    assert yaml.safe_load(y.read_text()) == json.loads(j.read_text())
    assert detect(y) == detect(j) == "br"
    with pytest.raises(UsageError, match=r"\.json, \.yaml or \.yml"):
        write_reports(run, tmp_path / "r.txt")


def test_a_report_read_back_compares_equal(run_dir: Path, tmp_path: Path) -> None:
    ours = load(run_dir)
    (path,) = write_reports(ours, tmp_path / "report.yaml")
    back = load(path)
    assert back.records() == [] and back.summary.imported is not None
    report = compare([ours, back])
    assert report.warnings == []  # same model, settings, lengths and tool: like for like
    for row in report.comparisons[0].rows:
        assert row.a is not None and row.b is not None, row.metric
        # Same figures; the run's side is computed afresh from its records, unrounded.
        assert row.b == pytest.approx(row.a, rel=1e-3, abs=1e-3), row.metric
        assert row.ci_low is None and row.ci_high is None  # a file of statistics has no interval
    by = {r.metric: r for r in report.comparisons[0].rows}
    assert by["ttft_ms.p50"].verdict == "same" and by["error_rate"].verdict == "same"


def test_unknown_figures_are_left_out_not_zero(server: FakeServerThread, tmp_path: Path) -> None:
    """Without streaming there is no first token: TTFT, TPOT and ITL are absent from the report."""
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(server.base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=8, stream=False),
        load=Load(requests=6),
        output=tmp_path / "plain",
    )
    run = asyncio.run(BenchSession(settings, argv=["tokenrace", "bench"]).run())
    ((_, model),) = reports(load(run.directory))
    doc = model.model_dump(mode="json", exclude_none=True)
    latency = valid(doc)["latency"]
    assert set(latency) == {"request_latency", "normalized_time_per_output_token"}
    back = from_benchmark_report(doc, tmp_path / "plain.json")
    assert back.summary.metrics.ttft_ms.mean is None and back.summary.metrics.ttft_ms.count == 0


@pytest.mark.slow
def test_a_sweep_writes_one_report_per_step_under_one_experiment(server: FakeServerThread, tmp_path: Path) -> None:
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(server.base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=16),
        load=Load(requests=8),
        output=tmp_path / "sweep",
    )
    sweep = asyncio.run(run_sweep(settings, SweepPlan(values=(1, 2), stop_early=False))).directory
    code, out, err = in_process_export(sweep, tmp_path / "out" / "sweep.json")
    assert code == 0, err
    paths = sorted((tmp_path / "out").glob("sweep-*.json"))
    assert [p.name for p in paths] == ["sweep-c1.json", "sweep-c2.json"] and all(str(p) in out for p in paths)
    docs = [json.loads(p.read_text()) for p in paths]
    for doc in docs:
        valid(doc)
    assert len({d["run"]["eid"] for d in docs}) == 1 and len({d["run"]["uid"] for d in docs}) == 2
    assert [d["scenario"]["load"]["standardized"]["stage"] for d in docs] == [0, 1]
    assert [d["scenario"]["load"]["standardized"]["concurrency"] for d in docs] == [1, 2]
    step = compare([load(sweep / "c2"), load(paths[1])])
    assert step.warnings == [] and all(r.b == pytest.approx(r.a, rel=1e-3, abs=1e-3) for r in step.comparisons[0].rows)


def in_process_export(run: Path, output: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tokenrace", "export", str(run), "--format", "br", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout, done.stderr


def test_llm_d_benchmarks_own_example_reads_in_our_units(run_dir: Path) -> None:
    """The published example (inference-perf, seconds) beside a tokenrace run (milliseconds)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    valid(doc)
    theirs = load(EXAMPLE)
    m, s = theirs.manifest, theirs.summary
    ttft = doc["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]
    assert s.metrics.ttft_ms.p99 == pytest.approx(ttft["p99"] * 1000, abs=1e-3)
    assert s.metrics.tpot_ms.mean == pytest.approx(36.8578, abs=1e-3)  # s/token -> ms/token
    assert s.requests.total == 500 and s.requests.failed == 0 and s.error_rate == 0
    assert m.tool == "inference-perf" and m.version == "0.3.0" and m.model == "Qwen/Qwen3-0.6B"
    assert m.settings.load is not None and m.settings.load.rate == 10.0
    report = compare([load(run_dir), theirs])
    by = {r.metric: r for r in report.comparisons[0].rows}
    assert by["ttft_ms.p50"].b == pytest.approx(36.2293, abs=1e-3) and by["ttft_ms.p95"].ci_low is None
    assert any("model differs" in w for w in report.warnings)


def test_reports_it_cannot_read_say_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "minutes"
    with pytest.raises(UsageError, match="time_to_first_token in 'minutes'"):
        from_benchmark_report(doc, tmp_path / "x.yaml")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**doc, "version": "0.1"}))
    with pytest.raises(UsageError, match=r"version 0\.1 \(tokenrace reads 0\.2, 0\.2\.1\)"):
        load(old)
    code, _, err = in_process(capsys, "export", str(tmp_path / "missing"), "--output", str(tmp_path / "r.json"))
    assert code == 2 and err.strip().count("\n") == 0 and "no such run directory" in err


def test_a_report_imported_into_a_run_directory_keeps_its_figures(run_dir: Path, tmp_path: Path) -> None:
    """`runs --import`: a directory with the report's summary and no records, read as statistics only."""
    directory = import_to_dir(EXAMPLE, tmp_path / "imported")
    kept, direct = load(directory), load(EXAMPLE)
    assert kept.records() == [] and kept.summary.metrics == direct.summary.metrics
    by = {r.metric: r for r in compare([load(run_dir), kept]).comparisons[0].rows}
    assert by["ttft_ms.p50"].b == direct.summary.metrics.ttft_ms.p50 and by["ttft_ms.p50"].ci_low is None


def test_an_imported_vllm_run_exports_under_vllms_name(tmp_path: Path) -> None:
    """A vLLM bench serve result converted: the load generator is vLLM's, its version unknown."""
    vllm = Path(__file__).resolve().parents[1] / "fixtures" / "imports" / "vllm_bench_serve.json"
    (path,) = write_reports(load(vllm), tmp_path / "vllm.json")
    doc = json.loads(path.read_text())
    valid(doc)
    standardized = doc["scenario"]["load"]["standardized"]
    assert (standardized["tool"], standardized["tool_version"]) == ("vllm-benchmark", "unknown")
    back = load(path)
    assert back.manifest.model == load(vllm).manifest.model and back.manifest.tool == "vllm-benchmark"
    row = {r.metric: r for r in compare([load(vllm), back]).comparisons[0].rows}["ttft_ms.p50"]
    assert row.b == pytest.approx(row.a, rel=1e-3)
