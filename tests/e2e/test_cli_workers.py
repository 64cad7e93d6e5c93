"""`tokenrace bench --workers`: a real CLI process whose sends leave from worker processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import line_count, sigint_default, wait_until

from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.calibration import Calibration, MachineInfo, save_calibration


def _start(url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tokenrace", "bench", "--url", url, "-o", str(out), *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)


def _wait_lines(path: Path, n: int, timeout: float = 60) -> None:
    wait_until(lambda: line_count(path) >= n, timeout, f"{n} lines in {path.name}")


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_ctrl_c_keeps_every_record_of_every_worker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 20, "output_tokens": 20}) as srv:
        proc = _start(srv.url, out, "--requests", "100000", "--concurrency", "6", "--workers", "2")
        _wait_lines(out / "records.jsonl", 20)
        proc.send_signal(signal.SIGINT)  # to the parent alone; its workers ignore SIGINT anyway
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    summary = json.loads((out / "summary.json").read_text())
    records = _records(out)
    assert summary["interrupted"] is True
    measured = [r for r in records if r["phase"] == "measure"]
    counts = summary["requests"]
    assert counts["total"] + counts["cancelled"] == len(measured)  # the summary is built from every record
    assert {r["worker"] for r in records} == {0, 1}
    cancelled = [r for r in measured if r["error_kind"] == "cancelled"]
    assert 1 <= len(cancelled) <= 6 and summary["requests"]["cancelled"] == len(cancelled)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["interrupted"] is True and manifest["workers"]["count"] == 2
    assert all(w["died"] is None and w["clock_shared"] for w in manifest["workers"]["workers"])


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_named_and_the_run_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 5, "output_tokens": 10}) as srv:
        proc = _start(srv.url, out, "--requests", "300", "--concurrency", "4", "--workers", "2", "--json")
        _wait_lines(out / "records.jsonl", 20)
        pid = json.loads((out / "manifest.json").read_text())["workers"]["workers"][1]["pid"]
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    records = [r for r in _records(out) if r["phase"] == "measure"]
    assert len(records) == 300 == summary["requests"]["total"]
    lost = [r for r in records if r["error_kind"] == "worker_lost"]
    assert 1 <= len(lost) <= 4 and summary["errors_by_kind"] == {"worker_lost": len(lost)}
    assert any(f"worker 1 (pid {pid}) died: killed by SIGKILL" in w["message"] for w in summary["warnings"])
    workers = json.loads((out / "manifest.json").read_text())["workers"]
    assert workers["lost_requests"] == len(lost) and "SIGKILL" in workers["workers"][1]["died"]


@pytest.mark.slow
def test_auto_without_a_calibration_sends_from_one_process_and_says_why(tmp_path: Path, tokenrace_home: Path) -> None:
    with spawn_fake_server({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 5}) as srv:
        p = subprocess.run(
            [sys.executable, "-m", "tokenrace", "bench", "--url", srv.url, "--requests", "5", "--workers", "auto"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    assert p.returncode == 0, p.stderr
    assert "--workers auto: 1 (no calibration" in p.stderr and "tokenrace calibrate" in p.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    assert all(r["worker"] is None for r in _records(run_dir))
    assert json.loads((run_dir / "manifest.json").read_text())["workers"]["kind"] == "process"


@pytest.mark.slow
def test_a_sweep_runs_every_step_over_the_workers(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    with spawn_fake_server({"ttft_ms": 10, "itl_ms": 2, "output_tokens": 8}) as srv:
        argv = ["sweep", "--url", srv.url, "--concurrencies", "2,4", "--requests", "16", "--workers", "2"]
        p = subprocess.run(
            [sys.executable, "-m", "tokenrace", *argv, "-o", str(out)], capture_output=True, text=True, timeout=300
        )
    assert p.returncode == 0, p.stderr
    for step in ("c2", "c4"):
        assert json.loads((out / step / "manifest.json").read_text())["workers"]["count"] == 2
        assert {r["worker"] for r in _records(out / step)} == {0, 1}


@pytest.mark.slow
def test_auto_splits_the_streams_by_the_calibrated_ceiling(tmp_path: Path, tokenrace_home: Path) -> None:
    machine = MachineInfo(host="h", cpu="c", cores=2, python="3", event_loop="uvloop", tokenrace="0")
    save_calibration(
        Calibration(
            created_at="2026-01-01T00:00:00+00:00", machine=machine, ceiling_chunks_per_s=1e5, ceiling_streams=2
        )
    )
    argv = ["bench", "--url", "", "--requests", "8", "--concurrency", "4", "--workers", "auto"]
    with spawn_fake_server({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 5}) as srv:
        argv[2] = srv.url
        p = subprocess.run(
            [sys.executable, "-m", "tokenrace", *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
    assert p.returncode == 0, p.stderr
    assert "--workers auto: 2 (4 streams against a one-process ceiling of 2 streams" in p.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    assert {r["worker"] for r in _records(run_dir) if r["phase"] == "measure"} == {0, 1}
