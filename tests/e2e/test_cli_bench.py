"""`tokenrace bench` end to end, as a user runs it: a real process against a real local server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import fake_key, in_process, line_count, sigint_default, tokenrace, wait_until

from tokenrace.fakes.blackhole import blackhole
from tokenrace.fakes.fake_server import spawn_fake_server

SECRET = fake_key("sk-", "donotleak")


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 2, "output_tokens": 16, "api_key": SECRET}) as srv:
        yield srv


def _files_text(d: Path) -> str:
    return "".join(p.read_text() for p in d.iterdir())


@pytest.mark.slow
def test_bench_writes_three_files(server: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = tokenrace(
        "bench", "--url", server.url, "--api-key", SECRET, "--concurrency", "8", "--requests", "40", "-o", str(out)
    )
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in out.iterdir()) == ["manifest.json", "records.jsonl", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == {"total": 40, "succeeded": 40, "failed": 0, "cancelled": 0}
    for name in (
        "ttft_ms",
        "tpot_ms",
        "itl_chunk_ms",
        "itl_token_ms",
        "e2e_ms",
        "output_tokens",
        "prompt_tokens",
        "tokens_per_chunk",
        "schedule_lag_ms",
    ):
        assert set(summary["metrics"][name]) == {"count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max"}
    assert summary["max_in_flight"] == 8 and summary["cold"]["ttft_ms"] is not None
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 41 and records[0]["phase"] == "cold"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == "fake-model" and manifest["finished_at"]
    assert manifest["settings"]["endpoint"]["api_key_from"] == "--api-key"
    assert "TTFT" in p.stdout and "run directory" in p.stdout
    # The key was used (the server demands it) and appears nowhere.
    assert SECRET not in _files_text(out) + p.stdout + p.stderr
    assert "***" in " ".join(manifest["command"])


@pytest.mark.slow
def test_key_from_env_and_json_output(server: Any, tmp_path: Path) -> None:
    p = tokenrace(
        "bench",
        "--url",
        server.base_url,
        "--requests",
        "5",
        "--json",
        "-o",
        str(tmp_path / "r"),
        env={"OPENAI_API_KEY": SECRET},
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["requests"]["succeeded"] == 5
    assert SECRET not in _files_text(tmp_path / "r") + p.stdout + p.stderr


@pytest.mark.slow
def test_wrong_key_is_one_actionable_line(server: Any, tmp_path: Path) -> None:
    p = tokenrace(
        "bench",
        "--provider",
        "groq",
        "--url",
        server.url,
        "--requests",
        "3",
        "-o",
        str(tmp_path / "r2"),
        env={"GROQ_API_KEY": fake_key("sk-", "wrong"), "OPENAI_API_KEY": ""},
    )
    assert p.returncode == 3
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "GROQ_API_KEY" in lines[0] and "401" in lines[0]
    assert fake_key("sk-", "wrong") not in p.stderr


@pytest.mark.slow
def test_unknown_model_lists_offered(server: Any, tmp_path: Path) -> None:
    p = tokenrace(
        "bench",
        "--url",
        server.url,
        "--api-key",
        SECRET,
        "--model",
        "gpt-9",
        "--requests",
        "2",
        "-o",
        str(tmp_path / "r"),
    )
    assert p.returncode == 3 and "fake-model" in p.stderr and "gpt-9" in p.stderr


@pytest.mark.slow
def test_wrong_url_says_what_was_tried(tmp_path: Path) -> None:
    p = tokenrace("bench", "--url", "http://127.0.0.1:9/v1", "--requests", "2", "-o", str(tmp_path / "r"))
    assert p.returncode == 3 and "http://127.0.0.1:9/v1/models" in p.stderr


@pytest.mark.slow
def test_a_host_whose_connects_hang_fails_within_the_connect_limit(tmp_path: Path) -> None:
    with blackhole() as port:
        t = time.monotonic()
        p = tokenrace(
            "bench",
            "--url",
            f"http://127.0.0.1:{port}",
            "--requests",
            "2",
            "--timeout-connect",
            "0.5",
            "-o",
            str(tmp_path / "r"),
        )
        elapsed = time.monotonic() - t
    assert p.returncode == 3 and "connect timed out after 0.5 s" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert elapsed < 30  # the connect limit, not the 15 s model-list limit or a kernel's SYN retries


def test_bad_flag_values_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # In this process (the tests above start the real one): the error comes from `main` either way.
    for args in (["--slo", "ttft=soon"], ["--input-tokens", "x"], ["--extra-body", "{bad"], ["--duration", "-1"]):
        p = in_process(capsys, "bench", "--url", "http://127.0.0.1:9", *args)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)


@pytest.mark.slow
def test_error_rate_exit_code(tmp_path: Path) -> None:
    with spawn_fake_server({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 4, "fault": "500", "fault_every": 2}) as srv:
        p = tokenrace(
            "bench",
            "--url",
            srv.url,
            "--requests",
            "10",
            "--no-cold",
            "--max-error-rate",
            "0.2",
            "-o",
            str(tmp_path / "r"),
        )
    assert p.returncode == 1
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["errors_by_kind"] == {"http_500": 5} and s["error_rate"] == 0.5


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    out = tmp_path / "r"
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 5, "output_tokens": 20}) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tokenrace",
                "bench",
                "--url",
                srv.url,
                "--requests",
                "100000",
                "--concurrency",
                "4",
                "-o",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_default,
        )
        wait_until(lambda: line_count(out / "records.jsonl") >= 12, 30, "12 records")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["requests"]["succeeded"] >= 10
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) >= summary["requests"]["total"] + 1
    assert json.loads((out / "manifest.json").read_text())["interrupted"] is True
