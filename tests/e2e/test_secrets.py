"""A key given by any route (--api-key, the provider's variable, OPENAI_API_KEY, a custom header,
a header read from the environment, a field of --extra-body) reaches no file, no output and no
history database. The keys are not shaped like API keys, so only exact redaction can hide them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import fake_key, in_process, tokenrace

from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.redact import is_secret_field, is_secret_header, redact_headers

KEY = fake_key("", "bearer")  # the key the server demands
HEADER_KEY = fake_key("", "header")
ENV_HEADER_KEY = fake_key("", "envheader")
BODY_KEY = fake_key("", "body")
ALL = (KEY, HEADER_KEY, ENV_HEADER_KEY, BODY_KEY)


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_fake_server({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8, "api_key": KEY}) as srv:
        yield srv


def _everything(run_dir: Path, home: Path, *outputs: str) -> bytes:
    files = [p for root in (run_dir, home) for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix in (".sqlite", ".db", ".sqlite3") for p in home.rglob("*")), "no history database was made"
    return b"".join(p.read_bytes() for p in files) + "".join(outputs).encode()


def _assert_hidden(run_dir: Path, home: Path, p: Any) -> None:
    assert p.returncode == 0, p.stderr
    blob = _everything(run_dir, home, p.stdout, p.stderr)
    for secret in ALL:
        assert secret.encode() not in blob, secret


@pytest.mark.slow
def test_every_route_of_a_key_is_hidden(server: Any, tmp_path: Path, tokenrace_home: Path) -> None:
    out = tmp_path / "r"
    p = tokenrace(
        "bench",
        "--url",
        server.url,
        "--api-key",
        KEY,
        "--header",
        f"X-Api-Key: {HEADER_KEY}",
        "--header",
        "X-Gateway-Pass: env:GATEWAY_PASS",  # not a secret-looking name: secret because it came from env
        "--header",
        "X-Team: blue",
        "--extra-body",
        json.dumps({"api_key": BODY_KEY, "max_tokens": 8}),
        "--requests",
        "3",
        "-o",
        str(out),
        env={"GATEWAY_PASS": ENV_HEADER_KEY},
    )
    _assert_hidden(out, tokenrace_home, p)
    manifest = json.loads((out / "manifest.json").read_text())
    request = manifest["settings"]["request"]
    assert request["extra_headers"] == {"X-Api-Key": "***", "X-Gateway-Pass": "***", "X-Team": "blue"}
    assert request["extra_body"] == {"api_key": "***", "max_tokens": 8}  # readable fields stay readable
    assert f"X-Api-Key: {'***'}" in manifest["command"] and "X-Gateway-Pass: env:GATEWAY_PASS" in manifest["command"]
    assert json.loads((out / "summary.json").read_text())["requests"]["succeeded"] == 3  # the key was used


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "env"),
    [
        ([], {"OPENAI_API_KEY": KEY}),
        (["--provider", "vllm"], {"VLLM_API_KEY": KEY, "OPENAI_API_KEY": ""}),
        # The Messages API sends the key as x-api-key (the fake server demands it there or as Bearer).
        (["--api", "messages"], {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": ""}),
        (["--provider", "anthropic"], {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": ""}),
        (["--api", "messages", "--api-key", KEY], {}),
    ],
    ids=["OPENAI_API_KEY", "provider variable", "ANTHROPIC_API_KEY", "anthropic preset", "x-api-key from the flag"],
)
def test_a_key_from_the_environment_is_hidden(
    server: Any, tmp_path: Path, tokenrace_home: Path, args: list[str], env: dict[str, str]
) -> None:
    out = tmp_path / "r"
    p = tokenrace("bench", "--url", server.url, *args, "--requests", "3", "-o", str(out), env=env)
    _assert_hidden(out, tokenrace_home, p)
    assert json.loads((out / "summary.json").read_text())["requests"]["succeeded"] == 3


def test_a_header_from_an_unset_variable_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--url", "http://127.0.0.1:9", "--header", "X-Api-Key: env:TOKENRACE_NO_SUCH_VAR")
    code, _, err = in_process(capsys, "bench", *args)
    assert code == 2 and "TOKENRACE_NO_SUCH_VAR" in err and "cannot reach" not in err


def test_secret_names() -> None:
    for name in ("Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "api-key", "X-Auth-Token", "x-SECRET"):
        assert is_secret_header(name), name
    for name in ("X-Session-ID", "Content-Type", "X-Team"):
        assert not is_secret_header(name), name
    for name in ("api_key", "apiKey", "access_token", "client_secret", "password"):
        assert is_secret_field(name), name
    for name in ("max_tokens", "top_k", "ignore_eos", "min_tokens"):
        assert not is_secret_field(name), name
    assert redact_headers({"X-Team": "blue", "X-Pass": "p"}, frozenset({"x-pass"})) == {
        "X-Team": "blue",
        "X-Pass": "***",
    }
