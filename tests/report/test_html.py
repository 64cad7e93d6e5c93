"""`tokenrace report`: one offline HTML file, checked in a real headless Chromium."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from tests.report.cdp import load_page
from tests.sweep.helpers import bench

from tokenrace.cli.show import show
from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.figures.cost import CostSpec, GpuCost
from tokenrace.figures.efficiency import EfficiencySpec, efficiency_of
from tokenrace.load.runner import Load
from tokenrace.model.engine import EngineRecord
from tokenrace.model.monitor import TimeseriesLine
from tokenrace.model.run import ProfileFile, SweepFile
from tokenrace.model.sections import ContentKind, ContentSpeed, Energy, GpuEnergy, Speculative
from tokenrace.model.summary import Cache, Cost, GpuBasis, ServerCache, Summary
from tokenrace.report.html import build, planner_bound, resource_series, write
from tokenrace.report.tables import (
    headline_lines,
    manifest_table,
    profile_view,
    summary_view,
    sweep_lines,
    sweep_view,
)
from tokenrace.runs.reader import load
from tokenrace.runs.settings import BenchSettings
from tokenrace.serve.launch import RunningEngine
from tokenrace.sweep.profile import _run_steps
from tokenrace.sweep.runner import SweepPlan, run_sweep

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

SAMPLE = {  # one line of timeseries.jsonl, in the layout of docs/monitor.md
    "wall": "2025-01-01T12:00:01+00:00",
    "gpu": [
        {
            "index": 0,
            "name": "GPU",
            "util_pct": 90.0,
            "mem_used_bytes": 7.0e10,
            "mem_total_bytes": 8.5e10,
            "throttle": [],
        }
    ],
    "system": {"cpu_pct": 30.0, "mem_used_bytes": 4.0e10},
    "server": {"engine": "vllm", "running": 12, "waiting": 3, "kv_cache_usage": 0.41},
}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    d = tmp_path_factory.mktemp("report")
    cfg = {"ttft_ms": 15, "itl_ms": 2, "output_tokens": 24, "tokens_per_chunk": 2, "load_itl_ms": 1}
    with FakeServerThread(cfg) as ok, FakeServerThread({**cfg, "fault": "500", "fault_every": 5}) as flaky:
        run = bench(ok.base_url, d / "run", label="steady", requests=40, concurrency=4, max_tokens=32).directory
        with (run / "timeseries.jsonl").open("w") as f:
            for i in range(20):
                s = json.loads(json.dumps(SAMPLE))
                s["t_ms"] = i * 250.0
                s["gpu"][0]["util_pct"] = 60 + i
                s["system"]["cpu_pct"] = 20 + (i % 5)
                s["server"]["running"] = i % 7
                f.write(json.dumps(s) + "\n")
        other = bench(flaky.base_url, d / "other", label="flaky", requests=40, concurrency=4, max_tokens=32).directory
        settings = BenchSettings(
            endpoint=ResolvedEndpoint(ok.base_url, None, None, "fake"),
            request=RequestOptions(max_tokens=32),
            load=Load(requests=16),
            output=d / "sweep",
            label="ladder",
        )
        sweep = asyncio.run(run_sweep(settings, SweepPlan(values=(1, 2, 4, 8), stop_early=False))).directory
    yield {"run": run, "other": other, "sweep": sweep, "dir": d}


def figures(text: str) -> int:
    return text.count('<figure class="chart">')


def test_resource_series_flattens_monitor_samples() -> None:
    samples = [
        {**SAMPLE, "t_ms": 0.0},
        {**SAMPLE, "t_ms": 500.0, "system": {"cpu_pct": 50.0, "mem_used_bytes": 4.0e10}},
    ]
    series = resource_series([TimeseriesLine.model_validate(s) for s in samples])
    assert series == {"system.cpu_pct": ([0.0, 0.5], [30.0, 50.0])}  # constant series are left out
    assert resource_series([]) == {}


@pytest.mark.slow
def test_reports_are_self_contained(made: dict[str, Path]) -> None:
    for inputs in ([made["run"]], [made["sweep"]], [made["run"], made["other"]]):
        text = build([load(p) for p in inputs], CostSpec(gpu=GpuCost(2.0)))
        assert "<script src" not in text and "<link" not in text and "@import" not in text
        assert len(text) > 3_000_000 and "Plotly" in text  # plotly.js is inlined, once
        assert text.count("Plotly.newPlot") == figures(text) >= 3
    run_page = build([load(made["run"])])
    assert "Resources: steady" in run_page and "Tokens per chunk" in run_page and "Manifest" in run_page


@pytest.mark.slow
def test_cli_writes_the_file(made: dict[str, Path]) -> None:
    out = made["dir"] / "cli" / "report.html"
    p = subprocess.run(
        [sys.executable, "-m", "tokenrace", "report", str(made["sweep"]), "-o", str(out), "--price", "in=0.1,out=0.2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr
    assert out.is_file() and "self-contained" in p.stdout
    assert "$/M out tok" in out.read_text()


@pytest.mark.slow
@pytest.mark.chromium
@pytest.mark.parametrize("kind", ["run", "sweep", "comparison"])
def test_report_renders_in_chromium_without_errors(made: dict[str, Path], kind: str) -> None:
    inputs = {"run": [made["run"]], "sweep": [made["sweep"]], "comparison": [made["run"], made["other"]]}[kind]
    html_file = write([load(p) for p in inputs], made["dir"] / f"{kind}.html", CostSpec(gpu=GpuCost(2.5, 2)))
    expected = figures(html_file.read_text())
    shot = ARTIFACTS / f"report-{kind}.png"
    check = load_page(html_file, shot)
    assert check.console_errors == [], check
    assert check.charts == expected and check.rendered == expected, (expected, check)
    assert check.traces >= expected, check
    # Nothing was fetched from a network: it works offline (data: and blob: URLs are the page's own).
    fetched = [u for u in check.requests if not u.startswith(("data:", "blob:", "about:"))]
    assert fetched == [html_file.resolve().as_uri()], check
    assert check.title and check.height > 1500, check
    assert shot.stat().st_size > 50_000 and re.match(rb"\x89PNG", shot.read_bytes()[:4])


def test_speed_of_light_from_the_planner(made: dict[str, Path]) -> None:
    run = load(made["run"])
    bound = planner_bound("H100-SXM", "llama-3.1-8b")(run)
    assert bound is not None and bound > 100  # tokens/s: aggregate decode bound at the run's concurrency
    assert planner_bound("H100-SXM")(run) is None  # "fake-model" is no model the planner knows
    sweep_page = build([load(made["sweep"])], sol=planner_bound("H100-SXM", "llama-3.1-8b"))
    assert "speed of light (plan)" in sweep_page


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A profile directory made the way `tokenrace bench` with no --url makes one, against the fake
    server standing in for llama-server (the engine record has the embedded engine's keys; its
    version is unknown, as when llama-server does not say)."""

    d = tmp_path_factory.mktemp("profile")
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8}) as srv:
        record = {
            "engine": "llama.cpp (llama-server)",
            "version": None,
            "model_file": {"path": "/models/SmolLM2-135M-Instruct-Q4_1.gguf", "file_size_bytes": 90_000_000},
            "threads": "2",
            "parallel_slots": 4,
        }
        engine = RunningEngine(None, srv.url, "fake-model", EngineRecord.model_validate(record))  # type: ignore[arg-type]  # no process: the fake stands in
        steps = (("c1", Load(requests=4, cold=True)), ("c2", Load(concurrency=2, requests=4, cold=False)))
        template = BenchSettings(endpoint=None, request=RequestOptions(max_tokens=8), output=d / "p")
        asyncio.run(_run_steps(engine, template, steps, None))
    yield d / "p"


def _human_text(page: str) -> str:
    """The page without plotly.js (a library, not text for the reader) and without markup."""
    page = re.sub(r"<script type='text/javascript'>.*?</script>", "", page, count=1, flags=re.S)
    return re.sub(r"<[^>]+>", " ", page)


def test_no_none_in_human_text(made: dict[str, Path], profile_dir: Path) -> None:
    profile = load(profile_dir)
    page = _human_text(build([profile]))
    assert "embedded profile: fake-model @ http://127.0.0.1:" in page and "the fixed profile" in page
    run_page = _human_text(build([load(made["run"])]))
    for text in (page, run_page):
        assert not re.search(r"\bNone\b", text), re.findall(r".{60}\bNone\b.{60}", text)[:3]
    console = Console(record=True, width=200)
    assert isinstance(profile.sweep, ProfileFile)
    console.print(profile_view(profile.sweep))
    console.print(summary_view(load(made["run"]).summary, title="run"))
    printed = console.export_text()
    assert "SmolLM2-135M-Instruct-Q4_1.gguf" in printed and "@ http://127.0.0.1:" in printed
    assert not re.search(r"\bNone\b", printed), printed


def _row_labels(table_html: str) -> list[str]:
    return re.findall(r"<tr class=''><td class=''>([^<]+)</td>", table_html)


def test_terminal_and_html_show_the_same_summary_and_step_rows(made: dict[str, Path]) -> None:
    run, sweep = load(made["run"]), load(made["sweep"])
    # TTFT answer, schedule lag and cached tokens (once missing from the HTML) as if measured.
    m = run.summary.metrics
    metrics = m.model_copy(
        update={"ttfa_ms": m.ttft_ms, "schedule_lag_ms": m.ttft_ms, "cached_tokens": m.output_tokens}
    )
    for summary in (run.summary, run.summary.model_copy(update={"metrics": metrics})):
        console = Console(record=True, width=200)
        console.print(summary_view(summary, title="run"))
        printed = re.findall(r"^│ (\S[^│]*?) +│", console.export_text(), re.M)
        page = build([replace(run, data=summary)])
        key_numbers = page.split("<h2>Key numbers</h2>", 1)[1].split("</section>", 1)[0]
        assert _row_labels(key_numbers) == printed
    assert {"TTFT answer", "Schedule lag", "Cached tokens", "TTFT", "Tokens/chunk"} <= set(printed)

    console = Console(record=True, width=200)
    assert isinstance(sweep.data, SweepFile)
    console.print(sweep_view(sweep.data))
    sweep_text = console.export_text()
    steps = [r.step for r in sweep.sweep.steps]
    sweep_page = build([sweep]).split("<h2>Key numbers</h2>", 1)[1].split("</section>", 1)[0]
    assert re.findall(r"<tr class='(?:knee)?'><td class=''>([^<]+)</td>", sweep_page) == steps
    assert re.findall(r"^│ (c\S+) +│", sweep_text, re.M) == steps
    assert "TPOT p50" in sweep_page and "errors" in sweep_page and "cached" in sweep_text


def test_a_run_with_a_bound_shows_the_nearest_published_point(made: dict[str, Path]) -> None:
    run = load(made["run"])
    plain = build([run])
    assert "Speed of light and published points" not in plain  # no --hardware: no bound, no section
    summary = run.summary.model_copy(deep=True)
    summary.metrics.prompt_tokens.mean = 512
    summary.metrics.output_tokens.mean = 256
    summary.metrics.tpot_ms.p50 = 7.0
    summary.efficiency = efficiency_of(summary, EfficiencySpec("H100-SXM", "llama-3.1-8b", "bf16"), 1)
    page = build([replace(run, data=summary)])
    section = page.split("Speed of light and published points", 1)[1].split("</section>", 1)[0]
    assert "decode efficiency" in section and "% of bound (" in section and "H100" in section
    assert summary.efficiency is not None and summary.efficiency.nearest_published is not None
    assert html.escape(summary.efficiency.nearest_published) in section


# --- one headline, one manifest: the terminal's and the HTML report's ---------------------------------

HEADLINE = [
    "TTFT p50",
    "TPOT p50",
    "speculative decoding",
    "E2E p95",
    "throughput",
    "requests",
    "prefix cache hit rate",
    "energy",
    "TPOT p50 by content",
    "cost per million output tokens",
]


def _everything(summary: Summary) -> Summary:
    """The summary with every optional headline figure, as an engine with speculative decoding, a
    prefix cache, energy counters and content kinds, priced by the GPU-hour, would give it."""
    content = ContentSpeed(
        kinds={"copy": ContentKind(tpot_ms_p50=1.0), "random": ContentKind(tpot_ms_p50=2.25)},
        ratio=2.25,
        verdict="decode speed depends on the content",
    )
    return summary.model_copy(
        update={
            "speculative": Speculative(source="vllm", acceptance_rate=0.72, tokens_per_step=2.1),
            "cache": Cache(
                hit_rate=0.45,
                cached_tokens=450,
                prompt_tokens=1000,
                source={"usage": 8},
                busted=False,
                server=ServerCache(source="vllm", hit_rate=0.44),
            ),
            "energy": Energy(
                source="nvml",
                method="counter",
                window_s=10.0,
                joules=3000.0,
                output_tokens_per_joule=0.52,
                mean_power_w=300.0,
                gpus=[GpuEnergy(gpu="0")],
            ),
            "content": content,
            "cost": Cost(
                basis="gpu",
                usd_per_million_output_tokens=12.3456,
                usd_per_1k_requests=0.5,
                gpu=GpuBasis(gpus=2, usd_per_gpu_hour=2.5),
            ),
        }
    )


def _cards(page: str) -> list[list[str]]:
    """Each key-number card of the page: its label, value and (when it has one) detail."""
    found = re.findall(
        r"<div class='card'><div class='label'>(.*?)</div><div class='value'>(.*?)</div>"
        r"(?:<div class='sub'>(.*?)</div>)?</div>",
        page,
    )
    return [[html.unescape(part) for part in card if part] for card in found]


def _as_line(card: list[str]) -> str:
    label, value, *detail = card
    return f"{label}: {value}" + "".join(f" · {d}" for d in detail)


def _under_the_table(printed: str) -> list[str]:
    return printed.split("└", 1)[1].splitlines()[1:]


def test_the_terminal_headline_and_the_html_cards_show_the_same_figures_in_order(made: dict[str, Path]) -> None:
    run, sweep = load(made["run"]), load(made["sweep"])
    for summary, labels in (
        (run.summary, [h for h in HEADLINE if h in ("TTFT p50", "TPOT p50", "E2E p95", "throughput", "requests")]),
        (_everything(run.summary), HEADLINE),
    ):
        cards = _cards(build([replace(run, data=summary)]))
        assert [c[0] for c in cards] == labels
        console = Console(record=True, width=400)
        console.print(summary_view(summary, title="run"))
        printed = _under_the_table(console.export_text())
        assert printed[: len(cards)] == [_as_line(c) for c in cards]
        assert not any(line.startswith(tuple(f"{x}:" for x in HEADLINE)) for line in printed[len(cards) :])
    lines = headline_lines(_everything(run.summary))
    assert "TPOT p50 by content: copy 1.00 ms, random 2.25 ms · slowest ÷ fastest ×2.25" in lines[8]
    assert lines[9].startswith("cost per million output tokens: $12.3456 · cost per 1k requests $0.5000 · 2 GPU(s)")

    # A sweep: the lines under its step table are its key-number cards.
    assert isinstance(sweep.data, SweepFile)
    cards = _cards(build([sweep]))
    console = Console(record=True, width=400)
    console.print(sweep_view(sweep.data))
    printed = _under_the_table(console.export_text())
    assert [c[0] for c in cards][:2] == ["steps", "knee"] and "peak throughput" in [c[0] for c in cards]
    assert printed[: len(cards)] == [_as_line(c) for c in cards] == sweep_lines(sweep.data)


@pytest.mark.slow
@pytest.mark.chromium
def test_the_cards_a_browser_shows_are_the_terminal_headline(made: dict[str, Path]) -> None:
    run = load(made["run"])
    summary = _everything(run.summary)
    html_file = write([replace(run, data=summary)], made["dir"] / "headline.html")
    check = load_page(html_file, ARTIFACTS / "report-headline.png", max_height=1200)
    assert check.console_errors == [], check
    console = Console(record=True, width=400)
    console.print(summary_view(summary, title="run"))
    assert [_as_line(c) for c in check.cards] == _under_the_table(console.export_text())[: len(HEADLINE)]
    assert [c[0] for c in check.cards] == HEADLINE


def test_show_and_the_html_report_print_one_manifest_table(made: dict[str, Path]) -> None:
    run = load(made["run"])
    table = manifest_table(run.manifest)
    labels = table.labels()
    assert labels[:3] == ["endpoint", "model", "measured by"] and {"load", "prompts", "command"} <= set(labels)
    console = Console(record=True, width=400)
    show(run, console)
    printed = re.split(r"^manifest *$", console.export_text(), maxsplit=1, flags=re.M)[1]
    assert re.findall(r"^│ (\S[^│]*?) +│", printed, re.M) == labels
    assert "concurrency 4" in printed
    section = build([run]).split("<h2>Manifest</h2>", 1)[1].split("</section>", 1)[0]
    assert _row_labels(section) == labels
    values = re.findall(r"<tr class=''><td class=''>[^<]+</td><td class=''>([^<]*)</td>", section)
    assert [html.unescape(v) for v in values] == [row.cells[1].text for row in table.rows]
