"""`tokenrace quality` as a user calls it (in-process, against a local answering server)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import fake_key, in_process, line_count, sigint_default, wait_until
from tests.quality.fake_answers import AnswerServer, behaviour

from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.quality.suites import resolve_suites
from tokenrace.serve.process import free_port

SECRET = fake_key("sk-", "quality")


def test_one_run_json_and_key_from_a_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_QUALITY_KEY", SECRET)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    items = resolve_suites(["copy", "sorting"], 6, 0)
    with AnswerServer(behaviour(items, 1.0)) as srv:
        args = ["quality", "--url", srv.url, "--suite", "copy", "--suite", "sorting", "--samples", "6"]
        code, out, err = in_process(
            capsys, *args, "--api-key-env", "MY_QUALITY_KEY", "-o", str(tmp_path / "r"), "--json"
        )
        auth = set(srv.behaviour.authorizations)
    assert code == 0, err
    result = json.loads(out)
    assert result["overall"]["accuracy"]["value"] == 1.0 and result["overall"]["accuracy"]["n"] == 12
    assert result["settings"]["api_key_from"] == "MY_QUALITY_KEY"
    assert auth == {f"Bearer {SECRET}"}
    for f in (tmp_path / "r").iterdir():
        assert SECRET not in f.read_text()


def test_compare_two_endpoints_then_two_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = resolve_suites(["arithmetic", "json_extract"], 20, 0)
    with AnswerServer(behaviour(items, 0.95, seed=1)) as a, AnswerServer(behaviour(items, 0.4, seed=2)) as b:
        args = ["quality", "--compare", a.url, b.url, "--suite", "arithmetic", "--suite", "json_extract"]
        code, out, err = in_process(capsys, *args, "--samples", "20", "-o", str(tmp_path / "cmp"), "--markdown")
    assert code == 0, err
    assert "| both right | only A right | only B right | both wrong | exact McNemar p |" in out
    assert "B worse" in out and "TTFT p50 (ms)" in out
    saved = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert saved["kind"] == "quality-comparison" and saved["paired"]["n"] == 40
    assert set(saved["suites"]) == {"arithmetic", "json_extract"}
    code, out, err = in_process(
        capsys, "quality", "--compare", str(tmp_path / "cmp" / "a"), str(tmp_path / "cmp" / "b"), "--json"
    )
    assert code == 0, err
    again = json.loads(out)
    assert again["paired"] == saved["paired"] and again["verdict"] == saved["verdict"] == "B worse"
    code, out, err = in_process(
        capsys, "quality", "--compare", str(tmp_path / "cmp" / "a"), str(tmp_path / "cmp" / "b")
    )
    assert code == 0 and "speed and quality, side by side" in out and "B worse" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compare", "http://127.0.0.1:9/v1"], "--compare takes two TARGETS"),
        (
            ["--url", "http://127.0.0.1:9/v1", "--api-key-env", "TOKENRACE_SURELY_UNSET"],
            "--api-key-env TOKENRACE_SURELY_UNSET",
        ),
        (["--suite", "nope"], "--suite: 'nope' is neither a built-in suite"),
        (["--compare", "x.txt", "y.txt"], "--compare: 'x.txt' is not a quality run directory"),
        (["http://127.0.0.1:9/v1"], "TARGETS are for --compare"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = in_process(capsys, "quality", *args)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    items = resolve_suites(["copy"], 40, 0)
    b = behaviour(items, 1.0)
    b.delay_s = 0.1
    out = tmp_path / "r"
    with AnswerServer(b) as srv:
        argv = [sys.executable, "-m", "tokenrace", "quality", "--url", srv.url, "--suite", "copy", "--samples", "40"]
        proc = subprocess.Popen(
            [*argv, "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_default,
        )
        wait_until(lambda: line_count(out / "items.jsonl") >= 3, what="3 items in items.jsonl")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "saved in" in err
    lines = (out / "items.jsonl").read_text().splitlines()
    saved = json.loads((out / "quality.json").read_text())
    assert saved["interrupted"] is True and 3 <= len(lines) < 40
    assert saved["overall"]["right"] == len(lines)


def test_unreachable_endpoint_is_one_line_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    for extra in ([], ["--model", "m"]):  # the model lookup fails first, or else the first item
        out = tmp_path / f"r{len(extra)}"
        code, _, err = in_process(
            capsys, "quality", "--url", url, "--suite", "copy", "--samples", "3", "-o", str(out), *extra
        )
        assert code == 3 and len(err.strip().splitlines()) == 1, err
        assert url.removesuffix("/v1") in err


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_quality_asks_through_another_api(
    api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = fake_key("sk-ant-", "quality")
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0.5, "output_tokens": 4, "api_key": key}) as srv:
        args = ["quality", "--url", srv.base_url, "--api", api, "--suite", "copy", "--samples", "3"]
        code, out, err = in_process(capsys, *args, "-o", str(tmp_path / "r"), "--json")
        sent = srv.log()
    assert code == 0, err
    result = json.loads(out)
    assert result["overall"]["accuracy"]["n"] == 3  # answered (wrongly: the fake says w0 w1 ...), none failed
    assert {e["path"] for e in sent} == {f"/v1/{api}"}
    assert {tuple(e["auth_headers"]) for e in sent} == {
        ("anthropic-version", "x-api-key") if api == "messages" else ("authorization",)
    }
    assert key not in "".join(f.read_text() for f in (tmp_path / "r").iterdir())
