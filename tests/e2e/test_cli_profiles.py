"""`--profile NAME` end to end: a reference's workload as defaults, flags winning, its figures shown
and saved, and MLPerf Endpoints' sweep with its offline point and Pareto plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import in_process

from tokenrace.fakes.fake_server import spawn_fake_server


def tokenrace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenrace", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 3, "output_tokens": 12}) as srv:
        yield srv


def test_bench_profile_sets_defaults_that_flags_override(server: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = tokenrace("bench", "--url", server.base_url, "--profile", "llmperf", "--requests", "6", "-o", str(out))
    assert p.returncode == 0, p.stderr
    settings = json.loads((out / "manifest.json").read_text())["settings"]
    assert settings["profile"] == "llmperf"
    assert settings["load"]["concurrency"] == 5 and settings["load"]["requests"] == 6  # the flag won
    assert settings["prompts"]["input_tokens"] == [550, 0.0] and settings["request"]["max_tokens"] == 150
    ref = json.loads((out / "summary.json").read_text())["reference"]
    assert ref["reference"] == "llmperf" and ref["llmperf"]["num_completed_requests"] == 6
    assert ref["llmperf"]["inter_token_latency_s"]["p50"] > 0
    assert "LLMPerf figures" in p.stdout and "overall output throughput" in p.stdout


@pytest.mark.slow
def test_bench_aa_profile_busts_the_cache_and_shows_its_percentiles(server: Any, tmp_path: Path) -> None:
    out = tmp_path / "aa"
    p = tokenrace("bench", "--url", server.base_url, "--profile", "aa-1k", "--requests", "3", "-o", str(out))
    assert p.returncode == 0, p.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["workload"]["cache_bust"] is True and manifest["settings"]["load"]["cold"] is False
    aa = json.loads((out / "summary.json").read_text())["reference"]["aa"]
    assert set(aa) == {"output_speed_tok_s", "ttft_s", "e2e_100_tokens_s"}
    assert aa["output_speed_tok_s"]["count"] == 3 and aa["output_speed_tok_s"]["p5"] is not None
    assert "Artificial Analysis figures" in p.stdout and "P75" in p.stdout
    html = tmp_path / "aa.html"
    r = tokenrace("report", str(out), "-o", str(html))
    assert r.returncode == 0, r.stderr
    assert "Artificial Analysis figures" in html.read_text()


def test_unknown_profile_is_one_line(server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    p = in_process(capsys, "bench", "--url", server.base_url, "--profile", "nope")
    assert p.returncode == 2 and "--profile" in p.stderr


@pytest.mark.slow
def test_sweep_endpoints_profile_adds_the_offline_point_and_pareto_plot(server: Any, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    p = tokenrace(
        "sweep", "--url", server.base_url, "--profile", "endpoints", "--concurrencies", "1,2", "--requests", "4",
        "-o", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    sweep = json.loads((out / "sweep.json").read_text())
    assert [s["step"] for s in sweep["steps"]] == ["c1", "c2", "offline"]
    offline = sweep["steps"][-1]
    assert offline["concurrency"] == offline["requests"]["total"] == 4 and offline["endpoints"]["offline"]
    assert all(s["endpoints"]["tps_per_user"] > 0 for s in sweep["steps"])
    assert sweep["plan"]["offline"] is True
    assert "MLPerf Endpoints figures" in p.stdout
    html = tmp_path / "r.html"
    r = tokenrace("report", str(out), "-o", str(html))
    assert r.returncode == 0, r.stderr
    assert "MLPerf Endpoints: tokens/s per user against system tokens/s" in html.read_text()


def test_claim_profile_sets_the_output_length_its_plan_prices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A host that is never reached: the plan is shown, then --yes is required without a terminal
    # (pytest's stdin is none). In this process: only the plan is looked at, not the exit path.
    hosted = ["claim", "--url", "http://192.0.2.1:9/v1", "--expect", "ttft_p50<=200ms", "--price", "in=0,out=1000000"]
    plain = in_process(capsys, *hosted, "-o", str(tmp_path / "a"))
    profiled = in_process(capsys, *hosted, "--profile", "llmperf", "-o", str(tmp_path / "b"))
    given = in_process(capsys, *hosted, "--profile", "llmperf", "--max-tokens", "10", "-o", str(tmp_path / "c"))
    assert plain.returncode == profiled.returncode == given.returncode == 2
    # The warm part's 11 requests at $1 per output token: 128 tokens by default, 150 with llmperf, 10 given.
    assert "1,408.0000" in plain.stderr and "1,650.0000" in profiled.stderr and "110.0000" in given.stderr
