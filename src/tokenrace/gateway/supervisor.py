"""`tokenrace gateway --workers N`: one gateway as N processes on one port, and their supervisor.

The supervisor reserves the port (a bound socket with SO_REUSEPORT that never listens, so port 0
resolves once for all workers), starts a private redis-server on a Unix socket when the file has
no `state:` (the workers share rate limits, breakers and canary decisions through it, see
workers.py), and starts N workers: `tokenrace gateway` processes that bind the same port with
SO_REUSEPORT, so the kernel spreads new connections over them. Then it

* restarts a worker that dies (at once; after a worker that died within `CRASH_S` of starting,
  it waits, doubling up to `MAX_BACKOFF_S`, so a crash loop does not spin);
* on SIGHUP, sends SIGHUP to every worker: each re-reads the file as a single gateway does;
* on SIGTERM or SIGINT, sends SIGTERM to every worker, waits while they drain (`drain_s`, and a
  margin), then stops its redis-server and removes its run directory.

Every child gets SIGTERM from the kernel if the supervisor itself is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import orjson

from tokenrace.errors import InvalidInput
from tokenrace.gateway.config import GatewayConfig
from tokenrace.gateway.workers import INDEX_ENV, RUN_DIR_ENV, STATE_URL_ENV, WORKERS_ENV

log = logging.getLogger("tokenrace.gateway")
CRASH_S = 1.0  # a worker that dies sooner than this after starting waits before the next start
MAX_BACKOFF_S = 5.0
READY_S = 60.0  # how long a worker may take to start listening
KILL_MARGIN_S = 10.0  # after drain_s, before SIGKILL
REDIS_START_S = 10.0


def worker_count(value: str, force: bool, cores: int | None = None) -> int:
    """`--workers`: a number from 1 to the cores this process may run on (more with `force`), or `auto`."""
    available = cores if cores is not None else len(os.sched_getaffinity(0))
    if value.strip().lower() == "auto":
        return available
    try:
        n = int(value)
    except ValueError:
        raise InvalidInput("workers", f"{value!r} is neither a whole number nor 'auto'") from None
    if n < 1:
        raise InvalidInput("workers", f"must be at least 1 (or 'auto', one per core), not {n}")
    if n > available and not force:
        raise InvalidInput(
            "workers", f"{n} is more than the {available} cores this process may use (add --force to run them anyway)"
        )
    return n


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies, whatever killed it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class WorkerProcess:
    index: int
    proc: subprocess.Popen[bytes]
    started: float
    ready: bool = False


class Supervisor:
    def __init__(
        self,
        config_path: Path,
        config: GatewayConfig,
        workers: int,
        host: str | None = None,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.config_path = config_path.resolve()
        self.config = config
        self.count = workers
        self.host = host if host is not None else config.listen.host
        self.port = port if port is not None else config.listen.port
        self.env = dict(os.environ if env is None else env)
        self.run_dir = Path(tempfile.mkdtemp(prefix="tokenrace-gateway-"))
        self.workers: dict[int, WorkerProcess] = {}
        self.redis: subprocess.Popen[bytes] | None = None
        self.state_url: str | None = None
        self._reservation: socket.socket | None = None
        self._stopping = False
        self._reload = False
        self._backoff: dict[int, float] = {}
        self._restart_at: dict[int, float] = {}

    # -- start ------------------------------------------------------------------------------------------

    def reserve(self) -> str:
        """Bind the port for all workers (port 0: pick one now); returns the gateway's URL."""
        family, kind, proto, _, address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        self._reservation = sock
        self.port = int(sock.getsockname()[1])
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start_redis(self) -> None:
        """The workers' shared state, when the file names none: a private redis-server, no disk."""
        if self.config.state is not None:
            return
        binary = shutil.which("redis-server")
        if binary is None:
            raise InvalidInput(
                "workers",
                "several workers share rate limits, breakers and canaries through a private redis-server, "
                "which is not installed (apt-get install redis-server), or through the Redis that `state:` names",
            )
        path = self.run_dir / "redis.sock"
        argv = [binary, "--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.run_dir), "--daemonize", "no"]
        self.redis = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the workers, which drain; not the state
            preexec_fn=_die_with_parent,
        )
        self.state_url = f"unix://{path}"
        give_up = time.monotonic() + REDIS_START_S
        while not _redis_answers(path):
            if self.redis.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"the workers' redis-server did not start (exit {self.redis.poll()})")
            time.sleep(0.02)

    def spawn(self, index: int) -> WorkerProcess:
        env = {
            **self.env,
            RUN_DIR_ENV: str(self.run_dir),
            INDEX_ENV: str(index),
            WORKERS_ENV: str(self.count),
        }
        if self.state_url is not None:
            env[STATE_URL_ENV] = self.state_url
        argv = [sys.executable, "-m", "tokenrace", "gateway", "--config", str(self.config_path)]
        argv += ["--host", self.host, "--port", str(self.port)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, preexec_fn=_die_with_parent)
        worker = self.workers[index] = WorkerProcess(index, proc, time.monotonic())
        self.event("worker_started", index=index, pid=proc.pid)
        return worker

    def start(self) -> str:
        """Reserve the port, start the state and every worker; returns the URL once all listen."""
        url = self.reserve()
        self.start_redis()
        for index in range(self.count):
            self.spawn(index)
        give_up = time.monotonic() + READY_S
        while not self._stopping and not all(w.ready for w in self.workers.values()):
            self._read_ready(max(0.0, give_up - time.monotonic()))
            dead = [w for w in self.workers.values() if not w.ready and w.proc.poll() is not None]
            if dead or time.monotonic() > give_up:
                why = f"worker {dead[0].index} exited with {dead[0].proc.returncode}" if dead else "timed out"
                raise RuntimeError(f"the gateway's workers did not all start ({why})")
        return url

    def _read_ready(self, timeout: float, extra: tuple[int, ...] = ()) -> None:
        """Wait up to `timeout` for a worker's READY line (or a byte on `extra`)."""
        waiting = {w.proc.stdout.fileno(): w for w in self.workers.values() if not w.ready and w.proc.stdout}
        try:
            readable, _, _ = select.select([*waiting, *extra], [], [], min(timeout, 1.0))  # 1 s: see _stopping
        except InterruptedError:
            return
        for fd in readable:
            worker = waiting.get(fd)
            if worker is None or worker.proc.stdout is None:
                continue
            line = worker.proc.stdout.readline()
            if line.startswith(b"READY "):
                worker.ready = True
                self.event("worker_ready", index=worker.index, pid=worker.proc.pid)

    # -- run --------------------------------------------------------------------------------------------

    def supervise(self, ready_cb: Callable[[str], None]) -> None:
        """Start everything, call `ready_cb(url)`, then until SIGTERM/SIGINT restart dead workers and
        pass SIGHUP on; then drain and stop all. The signals are caught from the start, so one that
        comes while the workers start is not lost (nor kills the supervisor without its drain)."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        old_fd = signal.set_wakeup_fd(wake_w)
        handlers = {
            signal.SIGTERM: self._on_stop,
            signal.SIGINT: self._on_stop,
            signal.SIGHUP: self._on_reload,
            signal.SIGCHLD: lambda signum, frame: None,  # only wakes the loop
        }
        previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
        try:
            url = self.start()
            if not self._stopping:
                ready_cb(url)
            while not self._stopping:
                self._read_ready(self._next_timeout(), (wake_r,))
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                if self._reload:
                    self._reload = False
                    self.signal_all(signal.SIGHUP, ready_only=True)  # one still starting reads the new file
                    self.event("reload_sent", workers=[w.proc.pid for w in self.workers.values()])
                self._replace_dead()
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(old_fd)
            os.close(wake_r)
            os.close(wake_w)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _on_reload(self, signum: int, frame: FrameType | None) -> None:
        self._reload = True

    def _next_timeout(self) -> float:
        if not self._restart_at:
            return 1.0
        return max(0.0, min(self._restart_at.values()) - time.monotonic())

    def _replace_dead(self) -> None:
        now = time.monotonic()
        for index, worker in list(self.workers.items()):
            if index in self._restart_at:
                if now >= self._restart_at[index]:
                    del self._restart_at[index]
                    self.spawn(index)
                continue
            code = worker.proc.poll()
            if code is None:
                continue
            lived = now - worker.started
            self.event("worker_exited", index=index, pid=worker.proc.pid, code=code, lived_s=round(lived, 3))
            if worker.proc.stdout is not None:
                worker.proc.stdout.close()
            if lived >= CRASH_S:
                self._backoff.pop(index, None)
                self.spawn(index)
            else:
                wait = self._backoff[index] = min(MAX_BACKOFF_S, 2 * self._backoff.get(index, 0.25))
                self._restart_at[index] = now + wait

    def signal_all(self, sig: int, ready_only: bool = False) -> None:
        for worker in self.workers.values():
            if worker.proc.poll() is None and (worker.ready or not ready_only):
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(sig)

    def stop(self) -> None:
        """Drain every worker (SIGTERM), then stop the state and remove the run directory."""
        self.signal_all(signal.SIGTERM)
        give_up = time.monotonic() + self.config.drain_s + KILL_MARGIN_S
        for worker in self.workers.values():
            try:
                worker.proc.wait(max(0.1, give_up - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
            if worker.proc.stdout is not None:
                worker.proc.stdout.close()
        if self.redis is not None:
            self.redis.terminate()
            try:
                self.redis.wait(5)
            except subprocess.TimeoutExpired:
                self.redis.kill()
                self.redis.wait()
        if self._reservation is not None:
            self._reservation.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.event("stopped", workers=self.count)

    def event(self, kind: str, **fields: object) -> None:
        log.info(
            "%s",
            orjson.dumps({"event": kind, "t": round(time.time(), 3), "supervisor": os.getpid(), **fields}).decode(),
        )


def _redis_answers(path: Path) -> bool:
    """Whether a redis-server answers PING on the Unix socket `path`."""
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(1.0)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def run(
    config_path: Path,
    config: GatewayConfig,
    workers: int,
    host: str | None,
    port: int | None,
    ready_cb: Callable[[str], None],
) -> None:
    """Blocking: start the workers, call `ready_cb(url)`, supervise until SIGTERM/SIGINT."""
    Supervisor(config_path, config, workers, host, port).supervise(ready_cb)
