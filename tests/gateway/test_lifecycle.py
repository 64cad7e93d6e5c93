"""The gateway as a real process: SIGHUP reloads without dropping in-flight streams, SIGTERM drains."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import wait_until

from tokenrace.fakes.fake_server import FakeServerThread

from .helpers import ADMIN_KEY, chat, config_text, http, spawn_gateway, sse_events

SLOW_STREAM: dict[str, Any] = {"fake": {"itl_ms": 50, "output_tokens": 30}}  # about 1.5 s


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServerThread]:
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 4, "models": ["m", "m2"]}) as srv:
        yield srv


def in_background(url: str, body: dict[str, object]) -> tuple[threading.Thread, list[tuple[int, bytes]]]:
    out: list[tuple[int, bytes]] = []

    def go() -> None:
        status, _, raw = http("POST", url, body)
        out.append((status, raw))

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, out


def in_flight(url: str) -> float:
    """Requests the gateway holds now, from its /metrics."""
    text = http("GET", url + "/metrics", key=None)[2].decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("tokenrace_gateway_in_flight{")
    )


def admin_state(url: str) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(http("GET", url + "/admin/state", key=ADMIN_KEY)[2])
    return state


def refused(url: str) -> bool:
    try:
        http("GET", url + "/healthz", key=None, timeout=2)
    except OSError:
        return True
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.mark.slow
def test_sighup_reloads_and_keeps_in_flight_streams(fake: FakeServerThread, tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}]))
    proc, url = spawn_gateway(path)
    try:
        thread, out = in_background(url + "/v1/chat/completions", chat(**SLOW_STREAM))
        wait_until(lambda: in_flight(url) >= 1, 10, "the stream in flight")
        path.write_text(
            config_text(
                {"b": {"url": fake.base_url}}, [{"model": "m", "backends": ["b"]}, {"model": "m2", "backends": ["b"]}]
            )
        )
        proc.send_signal(signal.SIGHUP)
        state = wait_until(lambda: (s := admin_state(url))["config"]["generation"] >= 2 and s, 10, "the reload")
        assert (
            state["config"]["generation"] == 2
            and sorted(state["routes"]) == ["m", "m2"]
            and list(state["backends"]) == ["b"]
        )
        assert http("POST", url + "/v1/chat/completions", chat(model="m2"))[0] == 200
        thread.join(10)
        status, raw = out[0]
        events = sse_events(raw)
        assert status == 200 and events[-1] == "[DONE]" and len(events) == 32  # role + 30 tokens + [DONE], nothing cut
        # A broken file is refused; the running config stays.
        path.write_text(config_text({"b": {"url": fake.base_url}}, [{"model": "m", "backends": ["nope"]}]))
        proc.send_signal(signal.SIGHUP)
        state = wait_until(
            lambda: (s := admin_state(url))["config"]["last_reload_error"] and s, 10, "the reload to be refused"
        )
        assert state["config"]["generation"] == 2 and "unknown backend 'nope'" in state["config"]["last_reload_error"]
        assert http("POST", url + "/v1/chat/completions", chat())[0] == 200
    finally:
        stop(proc)


@pytest.mark.slow
def test_sigterm_drains_in_flight_streams_then_exits(fake: FakeServerThread, tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], drain_s=10))
    proc, url = spawn_gateway(path)
    try:
        thread, out = in_background(url + "/v1/chat/completions", chat(**SLOW_STREAM))
        wait_until(lambda: in_flight(url) >= 1, 10, "the stream in flight")
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: refused(url), 5, "no new connections while draining")
        assert thread.is_alive()  # refused while the stream still runs, not because the process ended
        thread.join(10)
        status, raw = out[0]
        assert status == 200 and sse_events(raw)[-1] == "[DONE]" and len(sse_events(raw)) == 32
        assert proc.wait(10) == 0 and time.monotonic() - t < 8
        assert proc.stderr is not None
        log = proc.stderr.read().decode()
        assert '"event":"draining"' in log and '"in_flight":1' in log and '"event":"stopped"' in log
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_stream_still_running_when_the_drain_ends_gets_an_error_event(fake: FakeServerThread, tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], drain_s=0.5))
    proc, url = spawn_gateway(path)
    try:
        thread, out = in_background(url + "/v1/chat/completions", chat(fake={"itl_ms": 100, "output_tokens": 50}))
        wait_until(lambda: in_flight(url) >= 1, 10, "the stream in flight")
        proc.send_signal(signal.SIGTERM)
        thread.join(10)
        status, raw = out[0]
        events = sse_events(raw)
        assert status == 200 and events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert last["choices"][0]["finish_reason"] == "error" and last["error"]["code"] == "gateway_shutdown"
        assert proc.wait(10) == 0
    finally:
        stop(proc)


def test_config_written_by_yaml_dump_round_trips(tmp_path: Path) -> None:
    text = config_text({"a": {"url": "http://x:1/v1"}}, [{"model": "m", "backends": ["a"]}])
    assert yaml.safe_load(text)["routes"][0]["model"] == "m"
