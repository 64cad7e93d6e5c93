from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple, TypeVar

import pytest

from tokenrace.cli import main
from tokenrace.client.sse import SSEEvent, SSEParser
from tokenrace.fakes.fake_server import FakeServerThread

T = TypeVar("T")


def require(what: str, found: T | None, install: str) -> T:
    """`found` (a path, a module) when the test dependency `what` is there. When it is not, the test
    fails under CI, where `scripts/setup.sh --tests` installs every test dependency, so a missing one
    is a broken setup; elsewhere it is skipped, saying how to install it. Only a missing GPU may skip
    under CI, and it does not go through here."""
    if found:
        return found
    message = f"{what} is not installed ({install})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; scripts/setup.sh --tests installs it", pytrace=False)
    pytest.skip(message, allow_module_level=True)


POLL_S = 0.01  # how often a wait looks again; short next to every deadline below


def wait_until(condition: Callable[[], T], timeout: float = 30.0, what: str = "") -> T:
    """Poll `condition` until it returns something truthy, and return that; the test fails after
    `timeout` seconds. The way a test waits for something to happen, instead of a fixed sleep: it
    goes on as soon as the condition holds, and says what it waited for when it never does."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what or getattr(condition, '__name__', 'a condition')}")
        time.sleep(POLL_S)
    return value


async def wait_until_async(condition: Callable[[], T], timeout: float = 30.0, what: str = "") -> T:
    """`wait_until` inside an event loop: the loop keeps running while the test waits."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what or getattr(condition, '__name__', 'a condition')}")
        await asyncio.sleep(POLL_S)
    return value


def line_count(path: Path) -> int:
    """Whole lines in a file another process is writing (0 while it does not exist)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def require_module(name: str, install: str) -> ModuleType:
    """The module `name`, imported; missing, as `require` says (a failure under CI, else a skip)."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        module = None
    return require(name, module, install)


REAL_ENGINES = ("embedded", "vllm")  # markers of the tests that start a real inference engine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on a real engine is slow: it belongs to the full suite, not the fast tier."""
    for item in items:
        if any(item.get_closest_marker(name) for name in REAL_ENGINES):
            item.add_marker(pytest.mark.slow)


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


def tokenrace(
    *args: str,
    home: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 180,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`tokenrace ARGS` as a real process (its own interpreter, no stdin), for what only a process
    shows: the exit path, signals, what a fresh import costs. `home` is its TOKENRACE_HOME; `env` adds
    to this process's environment. For flags and errors, `in_process` answers without the start-up."""
    extra = {**(env or {}), **({"TOKENRACE_HOME": str(home)} if home is not None else {})}
    return subprocess.run(
        [sys.executable, "-m", "tokenrace", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **extra},
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


class Ran(NamedTuple):
    """What a command run in this process left: its exit code and output, named as a
    CompletedProcess names them (it unpacks as `code, out, err` too)."""

    returncode: int
    stdout: str
    stderr: str


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """`tokenrace ARGS` run in this process: no interpreter to start and nothing to import again,
    with the same exit code and output as the process (`main` maps errors to them)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return Ran(code, out, err)


def sigint_default() -> None:
    """preexec_fn for a child a test will interrupt: a shell without job control starts background
    jobs with SIGINT ignored, children inherit that, and Python then installs no Ctrl-C handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def parse_all(stream: bytes) -> list[SSEEvent]:
    """The events of a complete SSE byte stream parsed in one go: the reference for split streams."""
    parser = SSEParser()
    return parser.feed(stream) + parser.close()


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)
