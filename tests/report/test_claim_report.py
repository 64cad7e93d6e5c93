"""Acceptance beside TPOT and tokens per joule in compare, the sweep table and the HTML report, from a
content sweep against a fake server with speculative decoding and a DCGM exporter page."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.load.runner import Load
from tokenrace.model.run import SweepFile
from tokenrace.report.compare import compare, compare_table
from tokenrace.report.html import build
from tokenrace.report.tables import headline_lines, sweep_table
from tokenrace.runs.reader import load_dir
from tokenrace.runs.run import Run
from tokenrace.runs.settings import BenchSettings, PromptSpec
from tokenrace.sweep.runner import SweepPlan, run_sweep
from tokenrace.table import to_rich

SERVER = {
    "ttft_ms": 2,
    "itl_ms": 2,
    "output_tokens": 16,
    "spec_tokens": 3,
    "dcgm_power_w": [400.0],
    "when_prompt_contains": {"verbatim": {"itl_ms": 1, "spec_acceptance": 0.95}, "digits": {"spec_acceptance": 0.1}},
}


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    out = tmp_path_factory.mktemp("claim") / "sweep"
    with FakeServerThread(SERVER) as srv:
        template = BenchSettings(
            endpoint=ResolvedEndpoint(srv.base_url, None, None, "fake"),
            request=RequestOptions(max_tokens=16),
            load=Load(requests=9, concurrency=3, cold=False),
            prompts=PromptSpec(input_tokens=(100, 0.0), output_tokens=(16, 0.0), content="all"),
            output=out,
            dcgm_url=f"{srv.url}/dcgm/metrics",
        )
        yield asyncio.run(run_sweep(template, SweepPlan(kind="content", values=())))


@pytest.mark.slow
def test_compare_shows_acceptance_beside_tpot_and_tokens_per_joule(swept: Run) -> None:
    steps = dict(swept.steps)
    report = compare([load_dir(steps["random"].directory), load_dir(steps["copy"].directory)])
    rows = report.comparisons[0].rows
    metrics = [r.metric for r in rows]
    accept = metrics.index("speculative.acceptance_rate")
    assert metrics[accept - 1].startswith("tpot_ms") and not metrics[accept + 1].startswith("tpot_ms")
    assert rows[accept].change is not None and rows[accept].change > 0.5  # copy accepts far more
    energy = rows[metrics.index("energy.output_tokens_per_joule")]
    assert energy.a is not None and energy.b is not None and energy.change is not None
    assert "speculative decoding" in compare_table(report.comparisons[0]).labels()


def test_the_sweep_table_and_the_html_report_show_them(swept: Run) -> None:
    assert isinstance(swept.sweep, SweepFile)
    table = to_rich(sweep_table(swept.sweep))
    headers = [c.header for c in table.columns]
    assert "accept" in headers and "tok/J" in headers
    page = build([load_dir(swept.directory)])
    # The HTML's step table is the terminal's: the same "accept" and "tok/J" columns.
    assert "<th class='num'>accept</th>" in page and "<th class='num'>tok/J</th>" in page
    # The key numbers are the terminal's headline, labels included (one declaration: report/headline.py).
    assert "TPOT p50 by content" in page
    run_page = build([load_dir(dict(swept.steps)["copy"].directory)])
    assert "speculative decoding" in run_page and "output tok/J" in run_page


def test_the_terminal_summary_says_what_the_speed_rests_on(swept: Run) -> None:
    lines = headline_lines(dict(swept.steps)["copy"].summary)
    assert any(line.startswith("speculative decoding: ") for line in lines)
    assert any(line.startswith("TPOT p50 by content: copy") for line in lines)
    assert any(line.startswith("energy: ") and "output tok/J" in line for line in lines)


@pytest.mark.slow
def test_two_content_sweeps_pair_kind_with_kind(swept: Run) -> None:
    sweep = load_dir(swept.directory)
    report = compare([sweep, sweep])
    assert [c.step for c in report.comparisons] == ["natural vs natural", "copy vs copy", "random vs random"]
