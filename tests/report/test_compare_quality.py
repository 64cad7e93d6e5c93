"""Quality beside speed: `bench --quality-samples`, then `compare` and `report` with the quality passes."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import in_process
from tests.quality.fake_answers import AnswerServer, behaviour

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.load.runner import Load
from tokenrace.quality.suites import resolve_suites
from tokenrace.report.compare import compare
from tokenrace.report.html import build
from tokenrace.runs.reader import load
from tokenrace.runs.session import BenchSettings
from tokenrace.sweep.runner import SweepPlan, run_sweep

SAMPLES = 10  # per built-in suite: 60 items


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[AnswerServer, AnswerServer]]:
    items = resolve_suites([], SAMPLES, 0)
    with AnswerServer(behaviour(items, 0.95, seed=1)) as good, AnswerServer(behaviour(items, 0.3, seed=2)) as bad:
        yield good, bad


def bench(capsys: pytest.CaptureFixture[str], url: str, out: Path, *extra: str) -> dict[str, object]:
    args = ["bench", "--url", url, "--requests", "6", "--concurrency", "2", "--max-tokens", "16", "-o", str(out)]
    code, stdout, err = in_process(capsys, *args, *extra, "--json")
    assert code == 0, err
    doc: dict[str, object] = json.loads(stdout)
    return doc


def test_bench_writes_a_quality_pass_that_compare_and_report_show(
    servers: tuple[AnswerServer, AnswerServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = servers
    seen = len(good.behaviour.bodies)
    doc = bench(capsys, good.url, tmp_path / "good", "--quality-samples", str(SAMPLES))
    bench(capsys, bad.url, tmp_path / "bad", "--quality-samples", str(SAMPLES))
    # The speed run (a cold request and 6), then one request per quality item, on the same endpoint.
    asked = [b["messages"][-1]["content"] in good.behaviour.answers for b in good.behaviour.bodies[seen:]]
    assert asked == [False] * 7 + [True] * 6 * SAMPLES
    quality = doc["quality"]
    assert isinstance(quality, dict) and quality["overall"]["accuracy"]["n"] == 6 * SAMPLES
    assert quality["settings"]["temperature"] == 0.0 and quality["settings"]["after"] == "bench"
    assert (tmp_path / "good" / "quality" / "items.jsonl").is_file()
    assert (tmp_path / "good" / "summary.json").is_file()  # the speed run is where it always is

    report = compare([load(tmp_path / "good"), load(tmp_path / "bad")])
    (section,) = report.quality
    assert section.comparison is not None and section.comparison.paired.n == 6 * SAMPLES
    assert section.comparison.verdict == "B worse"
    row = {r.metric: r for r in report.comparisons[0].rows}["quality.accuracy"]
    assert row.verdict == "B worse" and row.significant is True and row.kind == "difference"
    assert row.ci_low is not None and row.ci_high is not None and row.ci_high < 0
    assert row.a is not None and row.b is not None and row.a > 0.8 > 0.5 > row.b
    assert "ttft_ms.p50" in {r.metric for r in report.comparisons[0].rows}  # speed in the same table

    code, out, err = in_process(capsys, "compare", str(tmp_path / "good"), str(tmp_path / "bad"), "--json")
    assert code == 0, err
    saved = json.loads(out)["quality"][0]
    assert saved["paired"]["verdict"] == "B worse" and saved["paired"]["paired"]["p_value"] < 0.001
    assert saved["a"]["quality"]["overall"]["accuracy"]["ci_low"] is not None
    code, out, _ = in_process(capsys, "compare", str(tmp_path / "good"), str(tmp_path / "bad"), "--markdown")
    assert "### Quality: A = good, B = bad" in out and "exact McNemar p" in out and "| accuracy (paired) |" in out
    code, out, _ = in_process(capsys, "compare", str(tmp_path / "good"), str(tmp_path / "bad"), "--csv")
    assert "quality.accuracy" in {r["metric"] for r in csv.DictReader(io.StringIO(out))}
    code, out, _ = in_process(capsys, "compare", str(tmp_path / "good"), str(tmp_path / "bad"))
    assert "Quality: A = good, B = bad" in out and "B worse" in out and "only A" in out

    page = build([load(tmp_path / "good"), load(tmp_path / "bad")])
    assert "Quality: does the faster one still answer correctly?" in page and "exact McNemar p" in page
    single = build([load(tmp_path / "good")])
    assert "Quality: are the answers right?" in single and "95 % CI (Wilson)" in single


def test_a_linked_pass_a_missing_pass_and_passes_over_other_items(
    servers: tuple[AnswerServer, AnswerServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = servers
    bench(capsys, good.url, tmp_path / "a")
    bench(capsys, bad.url, tmp_path / "b")
    bench(capsys, bad.url, tmp_path / "plain")
    assert compare([load(tmp_path / "a"), load(tmp_path / "plain")]).quality == []  # no pass: no section
    # A pass made later and linked by its place: RUN/quality (or RUN itself).
    for run, srv, seed in ((tmp_path / "a", good, "0"), (tmp_path / "b", bad, "5")):
        args = ["quality", "--url", srv.url, "--suite", "copy", "--samples", "5", "--seed", seed, "--json"]
        code, _, err = in_process(capsys, *args, "-o", str(run / "quality" if seed == "0" else run))
        assert code == 0, err
    report = compare([load(tmp_path / "a"), load(tmp_path / "plain")])
    (section,) = report.quality
    assert section.comparison is None and section.a.result is not None and section.b.result is None
    assert any("plain has no quality pass" in w for w in report.warnings)
    assert {r.metric: r for r in report.comparisons[0].rows}["quality.accuracy"].verdict == "not paired"
    # Different seeds ask different questions: both accuracies shown, no paired verdict, a warning.
    report = compare([load(tmp_path / "a"), load(tmp_path / "b")])
    (section,) = report.quality
    assert section.comparison is None and section.note is not None and "no paired verdict" in section.note
    assert section.b.directory == tmp_path / "b"
    code, out, _ = in_process(capsys, "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--strict")
    assert code == 1 and "no paired verdict" in out


def test_bad_quality_samples_is_refused_before_the_speed_run(
    servers: tuple[AnswerServer, AnswerServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, _ = servers
    seen = good.behaviour.requests
    code, _, err = in_process(capsys, "bench", "--url", good.url, "--quality-samples", "0", "-o", str(tmp_path / "r"))
    assert code == 2 and "--quality-samples must be at least 1" in err and len(err.strip().splitlines()) == 1
    assert good.behaviour.requests == seen and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_sweeps_are_compared_by_the_passes_in_their_directories(
    servers: tuple[AnswerServer, AnswerServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    dirs = []
    for srv, name in zip(servers, ("sa", "sb"), strict=True):
        settings = BenchSettings(
            endpoint=ResolvedEndpoint(srv.url, None, None, "fake"),
            request=RequestOptions(max_tokens=8),
            load=Load(requests=4, cold=False),
            output=tmp_path / name,
        )
        d = asyncio.run(run_sweep(settings, SweepPlan(values=(1, 2), stop_early=False))).directory
        args = ["quality", "--url", srv.url, "--suite", "copy", "--suite", "sorting", "--samples", str(SAMPLES)]
        code, _, err = in_process(capsys, *args, "-o", str(d / "quality"), "--json")
        assert code == 0, err
        dirs.append(d)
    report = compare([load(dirs[0]), load(dirs[1])])
    (section,) = report.quality
    assert section.comparison is not None and section.comparison.verdict == "B worse"
    assert all("quality.accuracy" not in {r.metric for r in c.rows} for c in report.comparisons)  # per run only
    assert "Quality: does the faster one still answer correctly?" in build([load(dirs[0]), load(dirs[1])])
    assert "Quality: are the answers right?" in build([load(dirs[0])])
