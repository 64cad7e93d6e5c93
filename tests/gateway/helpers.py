"""Run a gateway for tests: in a background thread (behaviour) or as a process (timing, signals)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import uvloop
import yaml
from aiohttp import web
from tests.conftest import fake_key, parse_all

from tokenrace.gateway import clock
from tokenrace.gateway.app import Gateway
from tokenrace.gateway.config import parse_config, resolve_secrets
from tokenrace.gateway.server import drain, start

ROOT = Path(__file__).resolve().parents[2]
CLIENT_KEY = "test-client-key-0123456789"
ADMIN_KEY = "test-admin-key-0123456789"
UPSTREAM_KEY = fake_key("sk-", "upstream")
ENV = {"GW_CLIENT_KEY": CLIENT_KEY, "GW_ADMIN_KEY": ADMIN_KEY, "GW_UPSTREAM_KEY": UPSTREAM_KEY}
AUTH = {"keys": [{"name": "tester", "key_env": "GW_CLIENT_KEY"}]}


def config_text(backends: dict[str, Any], routes: list[dict[str, Any]], **extra: Any) -> str:
    doc: dict[str, Any] = {"backends": backends, "routes": routes, "auth": AUTH, "admin": {"key_env": "GW_ADMIN_KEY"}}
    doc.update(extra)
    text: str = yaml.safe_dump(doc, sort_keys=False)
    return text


class SteppedClock(clock.Clock):
    """The real clock plus the time a test adds with `advance()`: a breaker's cooldown or a token
    bucket's refill comes due at once instead of after a sleep, while everything else runs on."""

    def __init__(self) -> None:
        self.added_s = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.added_s

    def wall(self) -> float:
        return time.time() + self.added_s

    def advance(self, seconds: float) -> None:
        self.added_s += seconds


class GatewayThread:
    """A gateway on its own event loop in a daemon thread."""

    def __init__(self, text: str, env: Mapping[str, str] | None = None, path: Path | None = None) -> None:
        environ = dict(ENV if env is None else env)
        config = parse_config(text, "test.yaml", environ)
        self.gw = Gateway(config, resolve_secrets(config, environ), path, environ)
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="gateway")

    def __enter__(self) -> GatewayThread:
        self._thread.start()
        if not self._ready.wait(15) or self._error is not None:
            raise RuntimeError(f"gateway did not start: {self._error!r}")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def call(self, fn: Any, *args: Any) -> Any:
        """Run fn(*args) on the gateway's loop thread and return its result (for state changes)."""
        assert self._loop is not None
        done = threading.Event()
        out: list[Any] = []

        def run() -> None:
            out.append(fn(*args))
            done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(10)
        return out[0] if out else None

    def _run(self) -> None:
        loop = uvloop.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - re-raised by start() in the test thread
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server, self.url = await start(self.gw, "127.0.0.1", 0)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await drain(self.gw, server)


def serve_chat(handle: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> str:
    """An aiohttp server for POST /v1/chat/completions on its own loop in a daemon thread; its base URL."""
    ready = threading.Event()
    url: list[str] = []

    async def start() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url.append(f"http://127.0.0.1:{runner.addresses[0][1]}/v1")
        ready.set()

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    threading.Thread(target=run, daemon=True, name="chat-backend").start()
    assert ready.wait(10), "the backend did not start"
    return url[0]


def spawn_gateway(
    config_path: Path, env: Mapping[str, str] | None = None, cpu: int | None = None, workers: int = 1
) -> tuple[subprocess.Popen[bytes], str]:
    """`tokenrace gateway --config PATH --port 0` as a child; returns (process, url). `workers` > 1:
    that many processes on the port under a supervisor (the child), `--force` so a 1-core CI runner
    can run two."""
    environ = {**os.environ, **ENV, **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), environ.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "tokenrace", "gateway", "--config", str(config_path), "--port", "0"]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    if workers > 1:
        argv += ["--workers", str(workers), "--force"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("READY "):
        proc.kill()
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise RuntimeError(f"gateway did not start: {line!r} {err[-2000:]}")
    return proc, line.removeprefix("READY ")


def http(
    method: str,
    url: str,
    body: Any = None,
    key: str | None = CLIENT_KEY,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, dict[str, str], bytes]:
    """A blocking request; returns (status, headers, body) for any status."""
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    h = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def sse_events(raw: bytes) -> list[str]:
    """The data fields of a complete SSE body."""
    return [e.data for e in parse_all(raw)]


def chat(model: str = "m", stream: Any = True, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello there"}], "stream": stream, **extra}
