"""`tokenrace calibrate`, and every bench comparing its own load with the calibration: real processes
against the real fake server."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import tokenrace

from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.calibration import Calibration, MachineInfo, load_calibration, save_calibration


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_fake_server({"ttft_ms": 10, "itl_ms": 1, "output_tokens": 12}) as srv:
        yield srv


@pytest.mark.slow
def test_calibrate_quick_json_saves_the_result(tokenrace_home: Path) -> None:
    p = tokenrace("calibrate", "--quick", "--json", home=tokenrace_home)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    for key in ("ceiling_chunks_per_s", "ceiling_streams", "ttft_bias_ms", "itl_bias_ms", "machine"):
        assert key in out
    for key in ("ttft_bias_ms", "itl_bias_ms"):
        assert set(out[key]) >= {"p50", "p99"} and out[key]["p50"] is not None
    assert out["machine"]["cores"] == os.cpu_count() and out["quick"] is True
    assert out["steps"] and out["steps"][0]["succeeded"] == out["steps"][0]["requests"] > 0
    # each step says how fast it really went, and the ceiling is a step that was within the limit
    assert all(s["chunks_per_s"] and s["chunks_per_s"] > 0 for s in out["steps"])
    if out["ceiling_streams"] is not None:
        assert any(s["within_limit"] and s["streams"] == out["ceiling_streams"] for s in out["steps"])
    saved = load_calibration(tokenrace_home / "calibration.json")
    assert saved is not None and saved.ceiling_streams == out["ceiling_streams"]
    assert saved.schema_version == 1


def _bench(server: Any, home: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return tokenrace(
        "bench", "--url", server.url, "--concurrency", "4", "--requests", "12", "-o", str(out), *extra, home=home
    )


@pytest.mark.slow
def test_bench_without_a_calibration_says_how_to_make_one(server: Any, tokenrace_home: Path, tmp_path: Path) -> None:
    p = _bench(server, tokenrace_home, tmp_path / "run")
    assert p.returncode == 0, p.stderr
    assert "tokenrace calibrate" in p.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["client_bound"] is None  # unknown, not false
    load = summary["client_load"]
    assert load["calibrated"] is False and load["streams"] == 4
    assert load["chunks_per_s"] > 0 and load["cpu_pct"] is not None and load["cpu_pct"] > 0


def _calibration(chunks_per_s: float | None, streams: int | None) -> Calibration:
    machine = MachineInfo(host="h", cpu="c", cores=2, python="3", event_loop="uvloop", tokenrace="0")
    return Calibration(
        created_at="2026-01-01T00:00:00+00:00",
        machine=machine,
        ceiling_chunks_per_s=chunks_per_s,
        ceiling_streams=streams,
    )


@pytest.mark.slow
def test_bench_past_a_low_ceiling_is_client_bound(server: Any, tokenrace_home: Path, tmp_path: Path) -> None:
    save_calibration(_calibration(5.0, 2), tokenrace_home / "calibration.json")
    p = _bench(server, tokenrace_home, tmp_path / "run", "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["client_bound"] is True
    causes = " ".join(summary["client_load"]["causes"])
    assert "past the calibrated ceiling of 5" in causes and "4 streams is past the calibrated ceiling of 2" in causes
    assert any("client may have limited this run" in w["message"] for w in summary["warnings"])
    assert "tokenrace calibrate` (under" not in p.stderr


@pytest.mark.slow
def test_bench_under_a_high_ceiling_is_not_client_bound(server: Any, tokenrace_home: Path, tmp_path: Path) -> None:
    save_calibration(_calibration(1e9, 1000), tokenrace_home / "calibration.json")
    p = _bench(server, tokenrace_home, tmp_path / "run", "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    cpu = summary["client_load"]["cpu_pct"]
    assert summary["client_bound"] is (cpu >= 90)
    assert summary["client_load"]["ceiling_streams"] == 1000
