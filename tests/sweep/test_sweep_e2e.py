"""Sweeps end to end against the fake server, whose latency grows with requests in flight."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.conftest import in_process, line_count, sigint_default, tokenrace, wait_until

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.figures.slo import parse_slo
from tokenrace.load.runner import Load
from tokenrace.model.engine import EngineRecord
from tokenrace.report.html import build
from tokenrace.runs.history import Filters, History
from tokenrace.runs.reader import load
from tokenrace.runs.settings import BenchSettings
from tokenrace.sweep.profile import _run_steps
from tokenrace.sweep.runner import SweepPlan, run_sweep

RUN_FILES = ["manifest.json", "records.jsonl", "summary.json"]


def settings(url: str, out: Path, **load: Any) -> BenchSettings:
    return BenchSettings(
        endpoint=ResolvedEndpoint(url + "/v1", None, None, "fake"),
        request=RequestOptions(max_tokens=16),
        load=Load(**{"requests": 24, **load}),
        output=out,
        label="t",
    )


@pytest.mark.slow
def test_concurrency_sweep_finds_the_knee_and_stops(knee_server: Any, tmp_path: Path, tokenrace_home: Path) -> None:
    out = tmp_path / "sweep"
    p = tokenrace(
        "sweep",
        "--url",
        knee_server.url,
        "--requests",
        "48",
        "--concurrencies",
        "1,2,4,8,16,32,64,128",
        "-o",
        str(out),
        "--label",
        "knee-test",
        home=tokenrace_home,
    )
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "sweep.json").read_text())
    assert s["kind"] == "sweep" and s["sweep"] == "concurrency" and s["stop_reason"] == "saturated"
    steps = [r["step"] for r in s["steps"]]
    assert steps[:4] == ["c1", "c2", "c4", "c8"] and len(steps) < 8  # stopped before the last step
    knee = s["knee"]
    # Throughput grows by >= 10 % up to the knee and not after it (the fake saturates near 1000 tok/s).
    assert knee is not None and knee["reason"] == "saturation" and 4 <= knee["concurrency"] <= 64
    i = knee["index"]
    assert s["steps"][i]["knee"] and all(r["gain"] >= 0.10 for r in s["steps"][1 : i + 1])
    after = s["steps"][i + 1]
    assert after["saturated"] and after["gain"] < 0.10 and after["e2e_ms"]["p95"] > s["steps"][i]["e2e_ms"]["p95"]
    for name in steps:  # every step is a full run directory
        assert sorted(x.name for x in (out / name).iterdir()) == RUN_FILES
        assert json.loads((out / name / "summary.json").read_text())["requests"]["succeeded"] == 48
    assert "◀ knee" in p.stdout and f"knee: {knee['step']}" in p.stdout
    with History.open() as h:  # the sweep and each step are in the history
        rows = h.list(Filters(label="knee-test", steps=True))
    assert {r.kind for r in rows} == {"sweep", "run"} and len(rows) == len(steps) + 1


def test_first_step_is_cold_and_the_rest_warm(fake: Any, tmp_path: Path) -> None:
    r = asyncio.run(run_sweep(settings(fake.url, tmp_path / "s"), SweepPlan(values=(1, 2), stop_early=False)))
    assert [n for n, _ in r.steps] == ["c1", "c2"]
    assert r.steps[0][1].summary.cold is not None and r.steps[1][1].summary.cold is None
    assert r.sweep.stop_reason == "completed"


def test_requests_scale_with_concurrency_unless_given(fake: Any, tmp_path: Path) -> None:
    plan = SweepPlan(values=(1, 8), stop_early=False, requests_per_worker=4)
    r = asyncio.run(run_sweep(settings(fake.url, tmp_path / "s", requests=10), plan))
    assert [res.summary.requests.total for _, res in r.steps] == [10, 32]


@pytest.mark.slow
def test_rate_sweep_runs_open_loop(fake: Any, tmp_path: Path) -> None:
    r = asyncio.run(run_sweep(settings(fake.url, tmp_path / "s", requests=20), SweepPlan(kind="rate", values=(20, 40))))
    rows = r.sweep.steps
    assert [x.step for x in rows] == ["r20", "r40"] and [x.rate for x in rows] == [20.0, 40.0]
    assert all(x.achieved_rate is not None for x in rows)


def test_prompt_length_sweep_fits_ttft(fake: Any, tmp_path: Path) -> None:
    plan = SweepPlan(kind="input_tokens", values=(64, 256))
    r = asyncio.run(run_sweep(settings(fake.url, tmp_path / "s", requests=6), plan))
    rows = r.sweep.steps
    assert [x.step for x in rows] == ["in64", "in256"]
    assert rows[0].prompt_tokens_mean < rows[1].prompt_tokens_mean  # the fake counts the words
    assert r.sweep.prefill.points == 2 and r.sweep.prefill.slope_ms_per_token is not None
    manifest = json.loads((tmp_path / "s" / "in256" / "manifest.json").read_text())
    assert manifest["prompts"]["name"].startswith("synthetic(input_tokens=256")


@pytest.mark.slow
def test_max_goodput_records_every_probe(knee_server: Any, tmp_path: Path) -> None:
    # e2e ~ 50 ms + 20 ms per other request in flight: 150 ms allows about 5 others, near 35-40 req/s.
    s = settings(knee_server.url, tmp_path / "g", requests=40, cold=False)
    s.slo = parse_slo("e2e<=150ms")
    plan = SweepPlan(kind="goodput", start_rate=8, tolerance=0.25, max_probes=8, attainment=0.9)
    r = asyncio.run(run_sweep(s, plan))
    g = r.sweep.goodput_search
    rows = r.sweep.steps
    assert len(rows) == g.probes and all(x.passed is not None for x in rows)
    assert [x.rate for x in rows[:3]] == [8.0, 16.0, 32.0] or not rows[2].passed
    assert g.best_rate is not None and 8 <= g.best_rate <= 128
    assert all((tmp_path / "g" / x.step / "records.jsonl").exists() for x in rows)
    assert rows[0].step == "p01-r8"


def test_bad_sweep_flags_are_one_line(fake: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # In this process (the tests around start the real one): the error comes from `main` either way.
    p = in_process(capsys, "sweep", "--url", fake.url, "--rates", "1,2", "--concurrencies", "1,2")
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "choose one sweep" in p.stderr
    p = in_process(capsys, "sweep", "--url", fake.url, "--max-goodput")
    assert p.returncode == 2 and "--slo" in p.stderr
    p = in_process(capsys, "sweep", "--url", fake.url, "--concurrencies", "1,x")
    assert p.returncode == 2 and "--concurrencies" in p.stderr


def test_profile_runs_its_steps_through_the_step_runner(fake: Any, tmp_path: Path) -> None:
    engine = SimpleNamespace(
        base_url=fake.base_url, model="fake-model", provider="llamacpp", info=EngineRecord(engine="fake")
    )
    template = BenchSettings(endpoint=None, load=Load(requests=4), output=tmp_path / "p")
    steps = (("c1", Load(concurrency=1, requests=3, cold=True)), ("c2", Load(concurrency=2, requests=4, cold=False)))
    result = asyncio.run(_run_steps(engine, template, steps, None))  # type: ignore[arg-type]
    prof = json.loads((tmp_path / "p" / "profile.json").read_text())
    assert [s["step"] for s in prof["steps"]] == ["c1", "c2"] and prof["cold"]["ttft_ms"] is not None
    assert result.steps[1][1].manifest.engine == EngineRecord(engine="fake")
    data = load(tmp_path / "p")  # rendered later from the files, like a sweep
    assert data.kind == "profile" and [r.throughput_tokens_per_s is not None for r in data.sweep.steps] == [
        True,
        True,
    ]
    with History.open() as h:  # the profile's steps were indexed as they were written
        assert len(h.list(Filters(steps=True))) == 2
    if importlib.util.find_spec("plotly"):
        assert build([data]).count('<figure class="chart">') >= 4


@pytest.mark.slow
def test_ctrl_c_keeps_the_steps_measured_so_far(knee_server: Any, tmp_path: Path, tokenrace_home: Path) -> None:
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokenrace",
            "sweep",
            "--url",
            knee_server.url,
            "--requests",
            "60",
            "--concurrencies",
            "1,2,4",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TOKENRACE_HOME": str(tokenrace_home)},
        stdin=subprocess.DEVNULL,
        preexec_fn=sigint_default,
    )
    records = out / "c2" / "records.jsonl"
    wait_until(lambda: line_count(records) >= 8, 90, "8 records in the second step")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    s = json.loads((out / "sweep.json").read_text())
    assert s["stop_reason"] == "interrupted" and [r["step"] for r in s["steps"]] == ["c1", "c2"]
    assert json.loads((out / "c1" / "summary.json").read_text())["requests"]["succeeded"] == 60
    partial = json.loads((out / "c2" / "summary.json").read_text())
    assert partial["interrupted"] is True and 8 <= partial["requests"]["succeeded"] < 60
    assert not (out / "c4").exists()
