"""Run an inference engine as a child process: capture its log, wait until it really answers,
and stop it (and everything it started) on exit, Ctrl-C or the parent's death."""

from __future__ import annotations

import asyncio
import collections
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import aiohttp

from tokenrace.errors import EngineError
from tokenrace.model.engine import Readiness


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: no orphan if tokenrace is killed
        except OSError:
            pass


class EngineProcess:
    """A child process in its own process group, with the last log lines kept in memory."""

    def __init__(
        self, argv: Sequence[str], name: str, env: dict[str, str] | None = None, log_path: Path | None = None
    ) -> None:
        self.argv = list(argv)
        self.name = name
        self.env = env
        self.log_path = log_path
        self.lines: collections.deque[str] = collections.deque(maxlen=200)
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> EngineProcess:
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                preexec_fn=_die_with_parent,
            )
        except FileNotFoundError:
            raise EngineError(f"{self.name}: cannot run {self.argv[0]!r}: not found") from None
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        log: IO[bytes] | None = open(self.log_path, "ab") if self.log_path else None
        try:
            for raw in self.proc.stdout:
                self.lines.append(raw.decode("utf-8", "replace").rstrip())
                if log is not None:
                    log.write(raw)
                    log.flush()
        finally:
            if log is not None:
                log.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 15) -> str:
        return "\n".join(list(self.lines)[-n:])

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(5)
        if self._reader is not None:
            self._reader.join(2)
        return self.proc.returncode

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)  # the whole group: engines start workers of their own
        except ProcessLookupError:
            pass

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def wait_ready(
    proc: EngineProcess, root: str, model: str | None, timeout_s: float, probe: str = "chat"
) -> Readiness:
    """Ready = the health endpoint answers 200 and a real one-token generation (with probe
    "embeddings": a real embedding) succeeds.

    Returns what was learnt: the model name served and the seconds each stage took.
    """
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        served = await _poll(proc, deadline, lambda: _healthy(s, root))
        t_health = time.monotonic() - t0
        name = model or (served if isinstance(served, str) else None) or "default"
        answers = _one_embedding if probe == "embeddings" else _one_token
        await _poll(proc, deadline, lambda: answers(s, root, name))
    return Readiness(model=name, health_s=round(t_health, 3), ready_s=round(time.monotonic() - t0, 3))


async def _poll(proc: EngineProcess, deadline: float, probe) -> object:  # type: ignore[no-untyped-def]
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if not proc.alive():
            code = proc.proc.returncode if proc.proc else None
            raise EngineError(
                f"{proc.name} exited with code {code} before it was ready. Last log lines:\n{proc.tail()}"
            )
        try:
            result = await probe()
            if result:
                return result
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            last_error = str(exc) or type(exc).__name__
        await asyncio.sleep(0.2)
    raise EngineError(f"{proc.name} was not ready in time ({last_error}). Last log lines:\n{proc.tail()}")


async def _healthy(s: aiohttp.ClientSession, root: str) -> object:
    async with s.get(f"{root}/v1/models") as r:
        if r.status != 200:
            return None
        data = await r.json(content_type=None)
    models = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    return models[0] if models and models[0] else True


async def _one_token(s: aiohttp.ClientSession, root: str, model: str) -> bool:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    async with s.post(f"{root}/v1/chat/completions", json=body) as r:
        if r.status != 200:
            return False
        data = await r.json(content_type=None)
    return bool(data.get("choices"))


async def _one_embedding(s: aiohttp.ClientSession, root: str, model: str) -> bool:
    async with s.post(f"{root}/v1/embeddings", json={"model": model, "input": "Hi"}) as r:
        if r.status != 200:
            return False
        data = await r.json(content_type=None)
    return bool(data.get("data"))
