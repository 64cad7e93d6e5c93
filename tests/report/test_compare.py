"""`tokenrace compare`: real runs against fake servers with a known difference."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.conftest import in_process
from tests.sweep.helpers import bench

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.errors import UsageError
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.load.runner import Load
from tokenrace.model.metrics import ERROR_RATE, THROUGHPUT, TPOT
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import Summary, Throughput
from tokenrace.report.compare import (
    MAX_BLOCKS,
    MIN_BLOCKS,
    Comparison,
    Row,
    compare,
    compare_table,
    throughput_row,
    token_blocks,
)
from tokenrace.runs.reader import load
from tokenrace.runs.run import Run
from tokenrace.runs.settings import BenchSettings
from tokenrace.sweep.runner import SweepPlan, run_sweep


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeServerThread, FakeServerThread]]:
    # ITL 5 ms: at 2 ms a loaded machine bunched the chunks of a whole run into ITL p50 0 ms, and a
    # zero has no ratio, so a run compared with itself got a "—" verdict.
    fast = {"ttft_ms": 15, "itl_ms": 5, "output_tokens": 12, "jitter_ms": 1}
    with FakeServerThread(fast) as a, FakeServerThread({**fast, "ttft_ms": 30}) as b:
        yield a, b


@pytest.fixture(scope="module")
def runs(
    servers: tuple[FakeServerThread, FakeServerThread], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("runs")
    a, b = servers
    return {
        "a": bench(a.base_url, d / "a", label="fast", requests=30, concurrency=2).directory,
        "b": bench(b.base_url, d / "b", label="slow-ttft", requests=30, concurrency=2).directory,
        "odd": bench(b.base_url, d / "odd", label="odd", requests=30, concurrency=4, max_tokens=8).directory,
    }


def rows(report: Any) -> dict[str, Any]:
    return {r.metric: r for r in report.comparisons[0].rows}


@pytest.mark.slow
def test_a_doubled_ttft_is_significant_and_decode_is_not(runs: dict[str, Path]) -> None:
    r = compare([load(runs["a"]), load(runs["b"])])
    by = rows(r)
    ttft = by["ttft_ms.p50"]
    # 30 ms against 15 ms: 2.0, widened for a loaded machine's few added milliseconds on either side.
    assert ttft.significant and ttft.verdict == "B worse" and 1.6 < ttft.change < 2.6
    assert ttft.ci_low > 1.4 and ttft.ci_high < 3.0
    # Decoding is programmed the same on both servers: TPOT within ~15 % whatever the verdict says.
    assert 0.85 < by["tpot_ms.p50"].change < 1.15
    assert by["error_rate"].kind == "difference" and by["error_rate"].significant is False
    assert (
        by["throughput.output_tokens_per_s"].ci_low is None
    )  # ~15 request lengths long: too short for a block interval
    assert r.warnings == []  # same model, prompts, lengths, load, streaming and version


@pytest.mark.slow
def test_a_run_against_itself_is_within_noise(runs: dict[str, Path]) -> None:
    r = compare([load(runs["a"]), load(runs["a"])])
    assert all(row.significant in (False, None) for row in r.comparisons[0].rows)
    verdicts = {row.verdict for row in r.comparisons[0].rows}
    assert {v for v in verdicts if not v.startswith("unbounded")} <= {"within noise", "same"}
    # A p95 from 30 requests per run has no honest interval: it is shown open, with the count.
    p95 = rows(r)["ttft_ms.p95"]
    assert p95.ci_low is None and p95.ci_high is None and p95.verdict == "unbounded: a p95 needs 72 requests a run"


@pytest.mark.slow
def test_conditions_that_differ_are_warned_about(runs: dict[str, Path]) -> None:
    r = compare([load(runs["a"]), load(runs["odd"])])
    text = " | ".join(r.warnings)
    assert "max_tokens differs: 16 (A) vs 8 (B)" in text and "concurrency differs: 2 (A) vs 4 (B)" in text
    assert "measured output length differs: mean 12.0 (A) vs 8.0 (B) tokens" in text  # max_tokens cut B short


def test_cli_outputs(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    p = in_process(capsys, "compare", str(runs["a"]), str(runs["odd"]))
    assert p.returncode == 0, p.stderr
    assert "conditions differ" in p.stdout and "max_tokens differs" in p.stdout and "TTFT p50" in p.stdout
    p = in_process(capsys, "compare", str(runs["a"]), str(runs["b"]), "--json")
    doc = json.loads(p.stdout)
    assert doc["method"]["resamples"] == 2000 and doc["comparisons"][0]["rows"][0]["metric"] == "ttft_ms.p50"
    p = in_process(capsys, "compare", str(runs["a"]), str(runs["odd"]), "--csv", "--strict")
    assert p.returncode == 1 and "WARNING: max_tokens differs" in p.stderr
    table = list(csv.DictReader(io.StringIO(p.stdout)))
    assert {t["metric"] for t in table} >= {"ttft_ms.p50", "e2e_ms.p95", "error_rate"}
    p = in_process(capsys, "compare", str(runs["a"]), str(runs["b"]), "--markdown")
    assert "| TTFT p50 | ms |" in p.stdout and "B worse" in p.stdout


@pytest.mark.slow
def test_three_runs_compare_against_the_first(runs: dict[str, Path]) -> None:
    r = compare([load(runs["a"]), load(runs["b"]), load(runs["odd"])])
    assert [(c.a, c.b) for c in r.comparisons] == [("fast", "slow-ttft"), ("fast", "odd")]


@pytest.mark.slow
def test_sweeps_are_compared_step_by_step(servers: tuple[FakeServerThread, FakeServerThread], tmp_path: Path) -> None:
    def sweep(srv: FakeServerThread, out: Path, values: tuple[float, ...]) -> Path:
        s = BenchSettings(
            endpoint=ResolvedEndpoint(srv.base_url, None, None, "fake"),
            request=RequestOptions(max_tokens=16),
            load=Load(requests=12),
            output=out,
        )
        return asyncio.run(run_sweep(s, SweepPlan(values=values, stop_early=False))).directory

    a = sweep(servers[0], tmp_path / "sa", (1, 2, 4))
    b = sweep(servers[1], tmp_path / "sb", (1, 2))
    r = compare([load(a), load(b)])
    assert [c.step for c in r.comparisons] == ["c1 vs c1", "c2 vs c2"]
    assert any("only 2 steps match" in w for w in r.warnings)
    assert set(r.knees or {}) == {"sa", "sb"}
    with pytest.raises(UsageError, match="runs with runs"):
        compare([load(a), load(a / "c1")])


# --- throughput's interval: a block bootstrap over time slices ------------------------------------------


def synthetic_run(tokens: int, requests: int, seed: int, e2e_ms: float = 100.0) -> Run:
    """One request at a time, back to back; each streams `tokens` chunks evenly over its e2e time."""
    rng = np.random.default_rng(seed)
    records, t = [], 0.0
    for i in range(requests):
        e2e = float(e2e_ms * rng.uniform(0.7, 1.3))
        offsets = list(np.linspace(e2e * 0.2, e2e, tokens))
        records.append(
            RequestRecord(
                seq=i, phase="measure", start_ms=t, e2e_ms=e2e, chunk_offsets_ms=offsets, output_tokens=tokens
            )
        )
        t += e2e
    summary = Summary(throughput=Throughput(output_tokens_per_s=tokens * requests / (t / 1000)))
    return Run(Path(f"synthetic-{seed}"), "run", summary, _records=records)


def throughput(a: Run, b: Run) -> Any:
    return throughput_row(a, b)


def test_throughput_blocks_average_to_the_runs_throughput() -> None:
    run = synthetic_run(tokens=20, requests=400, seed=1)
    blocks = token_blocks(run)
    assert blocks is not None and len(blocks) == MAX_BLOCKS
    assert abs(blocks.mean() - run.summary.throughput.output_tokens_per_s) < 1e-6 * blocks.mean()


def test_throughput_interval_separates_a_real_difference_and_not_noise() -> None:
    same = throughput(synthetic_run(20, 400, seed=1), synthetic_run(20, 400, seed=2))
    assert same.ci_low is not None and same.ci_low < 1 < same.ci_high and same.significant is False
    assert same.verdict == "within noise"
    faster = throughput(synthetic_run(20, 400, seed=1), synthetic_run(30, 400, seed=2))
    assert 1.4 < faster.change < 1.6 and faster.significant is True and faster.ci_low > 1.3
    assert faster.verdict == "B better"


def test_a_run_too_short_for_blocks_gets_no_throughput_interval() -> None:
    short = synthetic_run(20, MIN_BLOCKS * 2 - 1, seed=1)  # fewer than MIN_BLOCKS slices of 2 request lengths
    assert token_blocks(short) is None
    row = throughput(short, synthetic_run(20, 400, seed=2))
    assert row.ci_low is None and row.change is not None and "no CI" in row.verdict


def test_a_declared_row_shows_its_declarations_label_unit_and_digits() -> None:
    """TPOT, throughput and the error rate are declared (model/metrics.py): their rows' label, unit
    column and digits are the declaration's; CSV and JSON keep the unit docs/metrics.md writes. An
    undeclared row (accuracy) keeps its own."""
    no_ci = (None, None, None, "—")
    rows = [
        Row("tpot_ms.p50", TPOT.label("p50"), TPOT.unit, 2.5, 3.25, 1.3, *no_ci),
        Row(THROUGHPUT.name, THROUGHPUT.display.label, THROUGHPUT.unit, 1234.56, 1000.0, 0.81, *no_ci),
        Row(ERROR_RATE.name, ERROR_RATE.display.label, ERROR_RATE.unit, 0.01234, 0.0, -0.01234, *no_ci),
        Row("quality.accuracy", "accuracy", "fraction", 0.01234, 0.0, -0.01234, *no_ci, kind="difference"),
    ]
    table = compare_table(Comparison("a", "b", "a", "b", rows, []))
    shown = [[c.text for c in row.cells[:4]] for row in table.rows]
    assert shown == [
        ["TPOT p50", "ms", "2.50", "3.25"],
        ["throughput", "output tok/s", "1,234.6", "1,000.0"],
        ["error rate", "%", "1.2 %", "0.0 %"],
        ["accuracy", "%", "1.23 %", "0.00 %"],
    ]
    assert rows[1].unit == "tokens/s"
