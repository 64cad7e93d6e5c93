from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenrace.testing.fake_server import FakeServerThread


@pytest.fixture(autouse=True)
def tokenrace_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs made by tests index into a throwaway history, never the user's."""
    home = tmp_path / "home"
    monkeypatch.setenv("TOKENRACE_HOME", str(home))
    return home


@pytest.fixture
def fake() -> Iterator[FakeServerThread]:
    """A fake OpenAI server in a background thread (quick, for behaviour, not for timing)."""
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8}) as srv:
        yield srv


def fake_key(prefix: str, name: str = "test") -> str:
    """A key-shaped test value (e.g. `fake_key("gsk_")`), built at run time so that no string a
    secret scanner would take for a real key is committed. It matches the redactor's patterns."""
    return f"{prefix}notarealkey{name}{'0' * 8}"


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`tokenrace ARGS` run in this process: (exit code, stdout, stderr)."""
    from tokenrace.cli import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def sigint_default() -> None:
    """preexec_fn for a child a test will interrupt: a shell without job control starts background
    jobs with SIGINT ignored, children inherit that, and Python then installs no Ctrl-C handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)
