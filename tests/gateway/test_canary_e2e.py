"""A canary through the real gateway: it advances on a healthy fake backend, and rolls back by
itself when that backend starts failing or slowing; clients never see the failures."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_until

from tokenrace.fakes.fake_server import FakeServerThread

from .helpers import ADMIN_KEY, GatewayThread, chat, config_text, http

QUICK = {"ttft_ms": 2, "itl_ms": 0.5, "output_tokens": 4, "models": ["m"]}
# Limits far from both the healthy backends (TTFT 2 ms) and the slow one (1200 ms), with absolute
# slack against the baseline, so that a busy 2-core CI machine cannot make a healthy canary breach.
SLO_TTFT_MS = 500
CANARY = {
    "backend": "new",
    "steps": [10, 30, 60, 100],
    "hold_s": 0.8,
    "window_s": 3.0,
    "min_requests": 5,
    "eval_interval_s": 0.1,
    "slo": {"error_rate": 0.05, "ttft_p95_ms": SLO_TTFT_MS},
    "margin": {"latency_ms": 400},
}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeServerThread, FakeServerThread, FakeServerThread]]:
    with (
        FakeServerThread(QUICK) as old,
        FakeServerThread(QUICK) as new,
        FakeServerThread({**QUICK, "ttft_ms": 1200}) as slow,
    ):
        yield old, new, slow


class Traffic:
    """Client threads sending streaming requests until stopped; keeps every status."""

    def __init__(self, gw: GatewayThread, threads: int = 4) -> None:
        self.gw = gw
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]
        for t in self._threads:
            t.start()

    def _run(self, i: int) -> None:
        while not self._stop.is_set():
            status, _, raw = http(
                "POST", self.gw.base_url + "/chat/completions", chat(), headers={"x-user": f"u{i}-{len(self.statuses)}"}
            )
            self.statuses.append(
                status if raw.rstrip().endswith(b"data: [DONE]") and b'"finish_reason":"error"' not in raw else -status
            )

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)


def canary_state(gw: GatewayThread) -> dict[str, Any]:
    status, _, raw = http("GET", gw.url + "/admin/state", key=ADMIN_KEY)
    assert status == 200
    canary: dict[str, Any] = json.loads(raw)["routes"]["m"]["canary"]
    return canary


def wait_for(gw: GatewayThread, predicate: Any, timeout: float = 15.0) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def reached() -> dict[str, Any] | None:
        seen.append(canary_state(gw))
        return seen[-1] if predicate(seen[-1]) else None

    try:
        snap = wait_until(reached, timeout, "the canary's state")
        assert snap is not None
        return snap
    except pytest.fail.Exception:
        raise AssertionError(f"canary never got there: {json.dumps(seen[-1])[:2000]}") from None


def write(path: Path, backends: dict[str, Any], canary: dict[str, Any] = CANARY) -> str:
    text = config_text(
        backends,
        [{"model": "m", "backends": ["old"], "canary": canary, "sticky_header": "x-user"}],
        retry={"attempts": 1, "backoff_ms": 1},
    )
    path.write_text(text)
    return text


def reload(gw: GatewayThread) -> None:
    assert gw.call(gw.gw.reload) is True


@pytest.mark.slow
def test_canary_advances_when_healthy_and_rolls_back_when_failing(servers: Any, tmp_path: Path) -> None:
    old, new, _ = servers
    path = tmp_path / "gateway.yaml"
    healthy = {"old": {"url": old.base_url}, "new": {"url": new.base_url}}
    gw = GatewayThread(write(path, healthy), path=path).__enter__()
    traffic = Traffic(gw)
    try:
        snap = wait_for(gw, lambda s: s["step"] >= 3)
        advances = [d for d in snap["decisions"] if d["action"] == "advance"]
        assert [d["to_weight_pct"] for d in advances[:2]] == [30, 60]
        numbers = advances[0]["numbers"]
        assert (
            numbers["canary"]["requests"] >= 5
            and numbers["canary"]["errors"] == 0
            and numbers["canary"]["ttft_p95_ms"] < SLO_TTFT_MS
        )
        assert numbers["baseline"]["requests"] > numbers["canary"]["requests"]
        write(path, {**healthy, "new": {"url": new.base_url, "headers": {"x-fake-fault": "500"}}})
        reload(gw)  # the canary's backend starts failing; the ramp itself is kept
        snap = wait_for(gw, lambda s: s["state"] == "rolled_back", timeout=10)
        rollback = snap["decisions"][-1]
        assert rollback["action"] == "rollback" and rollback["to_weight_pct"] == 0 and rollback["from_weight_pct"] >= 60
        assert "error_rate" in rollback["reason"] or "breaker open" in rollback["reason"]
        _, _, metrics = http("GET", gw.url + "/metrics", key=None)
        assert 'tokenrace_gateway_canary_weight_percent{backend="new",route="m"} 0.0' in metrics.decode()
        assert 'tokenrace_gateway_canary_decisions_total{action="rollback",route="m"} 1.0' in metrics.decode()
        served_by_canary = len(new.log())
        time.sleep(0.5)
        assert len(new.log()) == served_by_canary  # weight 0: nothing goes there any more
    finally:
        traffic.stop()
        gw.stop()
    assert traffic.statuses and all(s == 200 for s in traffic.statuses)  # failures fell back to the baseline


@pytest.mark.slow
def test_canary_rolls_back_when_its_backend_slows(servers: Any, tmp_path: Path) -> None:
    old, new, slow = servers
    path = tmp_path / "gateway.yaml"
    gw = GatewayThread(write(path, {"old": {"url": old.base_url}, "new": {"url": new.base_url}}), path=path).__enter__()
    traffic = Traffic(gw)
    try:
        wait_for(gw, lambda s: s["step"] >= 2)
        write(path, {"old": {"url": old.base_url}, "new": {"url": slow.base_url}})
        reload(gw)
        snap = wait_for(gw, lambda s: s["state"] == "rolled_back", timeout=45)
        rollback = snap["decisions"][-1]
        assert "ttft_p95_ms vs SLO" in rollback["reason"] and rollback["numbers"]["canary"]["ttft_p95_ms"] > SLO_TTFT_MS
        # By hand: resume restarts the ramp at the first step; promote finishes it.
        status, _, raw = http("POST", gw.url + "/admin/canary/m/resume", key=ADMIN_KEY)
        assert status == 200 and json.loads(raw)["canary"]["weight_pct"] == 10
        status, _, raw = http("POST", gw.url + "/admin/canary/promote?route=m", key=ADMIN_KEY)
        assert status == 200 and json.loads(raw)["canary"]["state"] == "promoted"
        assert canary_state(gw)["decisions"][-1]["by"] == "admin"
    finally:
        traffic.stop()
        gw.stop()
    assert all(s == 200 for s in traffic.statuses)
