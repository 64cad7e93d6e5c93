"""A fake OpenAI-compatible server: a measuring instrument and a test fixture.

It streams deterministic text ("w0 w1 w2 ...", one word per token) on a
programmed schedule (TTFT, ITL, jitter, load-dependent slowdown), injects
faults on demand, and logs the exact perf_counter_ns() at which every SSE event
was handed to the socket, so a client's timings can be checked against truth.

Configure it with `FakeConfig` (see fake_config.py for every field); any
request may override fields for itself with `"fake": {...}` in its JSON body or
an `x-fake-fault: <kind>` header.

Ways to run it:

* Command line (prints exactly one line `READY http://HOST:PORT`, then serves
  until SIGTERM/SIGINT)::

      python -m tokenrace.fakes.fake_server --port 0 --config '{"ttft_ms": 100}'
      python -m tokenrace.fakes.fake_server --config-file fake.json

* `spawn_fake_server(config)`: the command line as a subprocess, as a context
  manager; `FakeServerThread(config)`: in a background thread of this process.
  Both expose `.url`, `.base_url` (`.../v1`), `.log()`, `.stats()`, `.reset()`.

* From other code (e.g. a CLI `tokenrace serve --fake`):

  - `build_app(config) -> aiohttp.web.Application`, to run any way you like;
  - `await start_server(config, host, port) -> RunningFakeServer` (`.url`,
    `.send_log`, `await .close()`);
  - `await serve(config, host, port, ready_cb=None, stop=None, freeze_gc=False)`:
    runs until `stop` is set (or, when `stop` is None, until SIGINT/SIGTERM),
    calling `ready_cb(url)` once listening. A process that only serves should
    pass freeze_gc=True (see `quiet_gc`): GC pauses otherwise stall all streams.

Instrument endpoints: GET /fake/log (list of send-log entries; `?wait_idle=S`
waits up to S s for in-flight requests to finish first), POST /fake/reset
(forgets the log and empties the prefix caches), GET /fake/stats ->
{"max_in_flight", "in_flight", "requests", "cache_blocks"}.

Besides chat and completions it speaks the OpenAI Responses API (/v1/responses) and Anthropic's
Messages API (/v1/messages, key in `x-api-key` or as a bearer token) on the same token schedule,
and answers /v1/embeddings, /v1/rerank and TEI's /rerank in one body sent at arrival + `ttft_ms`
+ `embedding_ms_per_input` per input (`rerank_ms_per_document` per document). `apis` lists the APIs
it serves; any other answers 404 as a server without the route does. The log records each
request's `inputs` (texts embedded or ranked) and the names of its credential headers.

Prefix caching is simulated when `prefix_cache` is on (fake_cache.py): usage
then reports `prompt_tokens_details.cached_tokens`, and `prefill_ms_per_token`
makes TTFT grow with the uncached part of the prompt. Each log entry records the
session header's value (`session_id`, header `X-Session-ID` unless
`session_header` says otherwise), the chat message count and the cached tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from tokenrace import aio
from tokenrace.fakes.fake_app import STATE, build_app
from tokenrace.fakes.fake_config import FAULT_KINDS, FakeConfig, as_config, merge_overrides
from tokenrace.fakes.fake_log import SendLog
from tokenrace.fakes.fake_openai import count_tokens

__all__ = [
    "FAULT_KINDS",
    "FakeConfig",
    "FakeServerProcess",
    "FakeServerThread",
    "RunningFakeServer",
    "build_app",
    "count_tokens",
    "main",
    "merge_overrides",
    "quiet_gc",
    "serve",
    "spawn_fake_server",
    "start_server",
]

ConfigLike = FakeConfig | Mapping[str, Any] | None
GC_GEN0_THRESHOLD = 50_000
# Stalled streams must not hold shutdown for aiohttp's default 60 s.
SHUTDOWN_TIMEOUT_S = 0.5


# --- in-loop runners ------------------------------------------------------------------


class RunningFakeServer:
    """A fake server listening in the current event loop."""

    def __init__(self, runner: web.AppRunner, url: str) -> None:
        self.runner = runner
        self.url = url

    @property
    def send_log(self) -> SendLog:
        """The live send log (records, in-flight counts) of this server."""
        return self.runner.app[STATE].log

    async def close(self) -> None:
        await self.runner.cleanup()


class _ReceiveStampingHandler(RequestHandler):
    """Stamps when bytes come off each connection's socket, before aiohttp parses them."""

    rx_ns: int | None = None

    def data_received(self, data: bytes) -> None:
        self.rx_ns = time.perf_counter_ns()
        super().data_received(data)


class _ReceiveStampingServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _ReceiveStampingHandler(self, loop=self._loop, **self._kwargs)


def _stamp_receives(server: web.Server | None) -> None:
    """Log when each request's bytes arrived (`received_ns`), not only when its handler began: the
    handler starts after aiohttp parsed and dispatched the request, which takes this process a
    fraction of a millisecond, more under load. Only for aiohttp's own Server class (else no stamp)."""
    if server is not None and type(server) is web.Server:
        server.__class__ = _ReceiveStampingServer


async def start_server(config: ConfigLike = None, host: str = "127.0.0.1", port: int = 0) -> RunningFakeServer:
    """Start listening (port 0 picks a free port) and return the running server."""
    runner = web.AppRunner(build_app(config), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    _stamp_receives(runner.server)
    await web.TCPSite(runner, host, port).start()
    bound_port = runner.addresses[0][1]
    url_host = f"[{host}]" if ":" in host else host
    return RunningFakeServer(runner, f"http://{url_host}:{bound_port}")


async def serve(
    config: ConfigLike = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    ready_cb: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    freeze_gc: bool = False,
) -> None:
    """Serve until `stop` is set; with stop=None, until SIGINT/SIGTERM.

    freeze_gc=True (for a process that does nothing but serve) calls
    `quiet_gc()` once listening, before `ready_cb`.
    """
    if stop is None:
        stop = asyncio.Event()
        _stop_on_signals(stop)
    server = await start_server(config, host, port)
    try:
        if freeze_gc:
            quiet_gc()
        if ready_cb is not None:
            ready_cb(server.url)
        await stop.wait()
    finally:
        await server.close()


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


def _stop_on_stdin_eof(stop: asyncio.Event) -> None:
    """Stop when stdin closes: the parent that spawned us has died or let go."""
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()

    def on_readable() -> None:
        if not os.read(fd, 4096):  # b"" is EOF
            loop.remove_reader(fd)
            stop.set()

    loop.add_reader(fd, on_readable)


# --- shared accessors -----------------------------------------------------------------


class _FakeServerAccess:
    """Synchronous accessors over HTTP, shared by the thread and process runners."""

    url: str = ""

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, `<url>/v1`."""
        return f"{self.url}/v1"

    def log(self, wait_idle_s: float = 0.0) -> list[dict[str, Any]]:
        """Send-log entries; waits up to `wait_idle_s` for in-flight requests to end first."""
        return list(self._call("GET", f"/fake/log?wait_idle={wait_idle_s}"))

    def stats(self) -> dict[str, Any]:
        return dict(self._call("GET", "/fake/stats"))

    def reset(self) -> None:
        self._call("POST", "/fake/reset")

    def _call(self, method: str, path: str) -> Any:
        request = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())


# --- background thread ----------------------------------------------------------------


class FakeServerThread(_FakeServerAccess):
    """The fake server on its own event loop in a daemon thread (for quick tests).

    It shares the GIL with the test's client, so for timing-critical
    measurements prefer `spawn_fake_server`. For the same reason `spin_ms`
    defaults to 0 here (unless the config sets it): a spinning server thread
    holds the GIL and delays the client's reads by up to the 5 ms switch interval.
    """

    def __init__(self, config: ConfigLike = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = _without_spin_unless_set(as_config(config))
        self._host, self._port = host, port
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="fake-server", daemon=True)

    def start(self, timeout_s: float = 10.0) -> FakeServerThread:
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            raise RuntimeError(f"fake server thread did not start: {self._error!r}")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def __enter__(self) -> FakeServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        loop = aio.loop_factory()()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - surfaced to start() through _error
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await start_server(self.config, self._host, self._port)
        self.url = server.url
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await server.close()


def _without_spin_unless_set(config: FakeConfig) -> FakeConfig:
    if "spin_ms" in config.model_fields_set:
        return config
    return config.model_copy(update={"spin_ms": 0.0})


# --- subprocess -----------------------------------------------------------------------


class FakeServerProcess(_FakeServerAccess):
    """The command-line server as a child process; `close()` (or leaving `with`) ends it."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str) -> None:
        self.proc = proc
        self.url = url
        # Also terminate the child if this object is dropped or Python exits.
        self._finalizer = weakref.finalize(self, _end_process, proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> FakeServerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def spawn_fake_server(
    config: ConfigLike = None, host: str = "127.0.0.1", port: int = 0, ready_timeout_s: float = 20.0
) -> FakeServerProcess:
    """Start `python -m tokenrace.fakes.fake_server` and wait for its READY line."""
    config_json = as_config(config).model_dump_json()
    argv = [
        sys.executable,
        "-m",
        "tokenrace.fakes.fake_server",
        "--host",
        host,
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(
        [*argv, "--config", config_json, "--exit-on-stdin-eof"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_child_env(),
    )
    try:
        url = _read_ready(proc, ready_timeout_s)
    except BaseException:
        _end_process(proc)
        raise
    return FakeServerProcess(proc, url)


def _child_env() -> dict[str, str]:
    """Make the child import this very tokenrace, even from an uninstalled checkout."""
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def _read_ready(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The URL from the child's `READY <url>` line; raises if it dies or is slow."""
    stdout = proc.stdout
    assert stdout is not None
    lines: list[bytes] = []
    # A thread, because a pipe read has no timeout; it ends when the line (or EOF) comes.
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    line = lines[0].decode().strip() if lines else ""
    if not line.startswith("READY "):
        code = proc.poll()
        raise RuntimeError(f"fake server did not become ready (exit code {code}, first line {line!r})")
    return line.removeprefix("READY ")


def _end_process(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    """SIGTERM, wait, then SIGKILL: never leave the child behind."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


# --- command line ---------------------------------------------------------------------


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tokenrace.fakes.fake_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--config", help="FakeConfig fields as a JSON object")
    parser.add_argument("--config-file", help="a JSON file of FakeConfig fields")
    parser.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="stop when stdin closes (used by spawn_fake_server)",
    )
    return parser.parse_args(argv)


def load_config(text: str | None, path: str | None) -> FakeConfig:
    """FakeConfig from a JSON file and/or JSON text (text fields win)."""
    fields: dict[str, Any] = {}
    if path is not None:
        fields.update(json.loads(Path(path).read_text()))
    if text is not None:
        fields.update(json.loads(text))
    return FakeConfig.model_validate(fields)


async def _main_async(config: FakeConfig, args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    _stop_on_signals(stop)
    if args.exit_on_stdin_eof:
        _stop_on_stdin_eof(stop)
    await serve(config, args.host, args.port, ready_cb=_announce, stop=stop, freeze_gc=True)


def _announce(url: str) -> None:
    print(f"READY {url}", flush=True)


def quiet_gc() -> None:
    """Keep garbage-collector pauses out of the send schedule (process mode only).

    A full collection walks every tracked object, including the ~10^5 that
    importing aiohttp and pydantic leaves behind, and stalls all streams at once
    (measured: 16 ms). Freezing moves those into a generation GC never scans;
    a higher gen-0 threshold makes the young collections rarer.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        config = load_config(args.config, args.config_file)
    except (ValueError, OSError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"fake_server: bad config: {exc}", file=sys.stderr)
        return 2
    aio.run(_main_async(config, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
