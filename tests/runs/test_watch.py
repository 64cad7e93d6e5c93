"""`tokenrace watch`: the schedule kept in the history, runs against the fake server on an injected
clock (nothing waits for real), restarts, the cost limit, and the rolling-P50 report."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from tokenrace.client.providers import resolve_endpoint
from tokenrace.client.request import RequestOptions
from tokenrace.fakes.fake_server import FakeServerProcess as FakeServer
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.figures.cost import Price
from tokenrace.load.runner import Load
from tokenrace.model.history import WatchPoint, WatchSlot
from tokenrace.report.watch import parse_published, rolling_p50, watch_html, watch_table
from tokenrace.runs.history import History
from tokenrace.runs.settings import BenchSettings, PromptSpec
from tokenrace.runs.watch import Watcher, WatchSpec, day_slots, run_cost_estimate

START = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


class FakeClock:
    """Time that moves only when the watch sleeps (or a test moves it)."""

    def __init__(self, now: datetime) -> None:
        self.t = now
        self.slept = 0.0

    def now(self) -> datetime:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.t += timedelta(seconds=seconds)
        await asyncio.sleep(0)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    # Its own process, and 10 ms between tokens: a stream the client cannot read in one gulp.
    with spawn_fake_server({"ttft_ms": 5, "itl_ms": 10, "output_tokens": 8}) as srv:
        yield srv


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[History]:
    monkeypatch.setenv("TOKENRACE_HOME", str(tmp_path / "home"))
    with History.open() as h:
        yield h


def settings(server: FakeServer) -> BenchSettings:
    return BenchSettings(
        endpoint=resolve_endpoint(server.base_url, None, None),
        request=RequestOptions(max_tokens=8),
        load=Load(requests=1, cold=False),
        prompts=PromptSpec(input_tokens=(64, 0.0)),
        profile="aa-1k",
    )


def spec(tmp_path: Path, **kw: object) -> WatchSpec:
    return dataclasses.replace(WatchSpec(name="w", profile="aa-1k", directory=tmp_path / "watch"), **kw)  # type: ignore[arg-type]


def test_day_slots_one_random_minute_in_each_window() -> None:
    slots = day_slots("w", 0, date(2026, 12, 1), 8)
    assert slots == day_slots("w", 0, date(2026, 12, 1), 8)  # the same after a restart
    assert slots != day_slots("w", 0, date(2026, 12, 2), 8)
    for i, t in enumerate(slots):
        assert i * 180 <= (t - START).total_seconds() / 60 < (i + 1) * 180
    assert len({(t - START).total_seconds() / 60 % 180 for t in slots}) > 1  # not all at a window's start


def test_watch_runs_each_slot_as_it_comes_due_without_waiting(
    server: FakeServer, tmp_path: Path, history: History
) -> None:
    clock = FakeClock(START)
    watcher = Watcher(spec(tmp_path), settings(server), history, clock)
    began = time.monotonic()
    runs = asyncio.run(watcher.forever(max_runs=3))
    assert runs == 3
    assert time.monotonic() - began < 120  # generous: three tiny runs, no schedule waiting
    assert clock.slept >= 3600  # the clock moved hours between the slots
    done = [s for s in watcher.store.slots("w") if s.status == "done"]
    assert len(done) == 3
    assert all(s.figures is not None and (s.figures.output_speed_tok_s or 0) > 0 for s in done)
    assert all(Path(s.run_path or "").is_dir() for s in done)
    # Each run is also a run of the history's index.
    assert {str(Path(r.path)) for r in history.list()} >= {s.run_path for s in done}


def test_a_restart_reads_the_schedule_and_skips_what_it_missed(
    server: FakeServer, tmp_path: Path, history: History
) -> None:
    first = Watcher(spec(tmp_path), settings(server), history, FakeClock(START))
    slots_before = [s.due_at for s in first.store.slots("w")]
    # Started again 10 hours later: the same slots; those missed are marked, only the latest runs.
    later = Watcher(spec(tmp_path), settings(server), history, FakeClock(START + timedelta(hours=10)))
    assert [s.due_at for s in later.store.slots("w")][: len(slots_before)] == slots_before
    slot = asyncio.run(later.once())
    assert slot is not None and slot.status == "done"
    statuses = [
        s.status for s in later.store.slots("w") if datetime.fromisoformat(s.due_at) <= START + timedelta(hours=10)
    ]
    assert statuses[-1] == "done" and set(statuses[:-1]) == {"missed"}
    assert asyncio.run(later.once()) is None  # nothing more is due at that time
    with pytest.raises(Exception, match="choose another name"):
        Watcher(spec(tmp_path, per_day=4), settings(server), history, FakeClock(START))


def test_the_cost_limit_stops_the_watch_before_a_run_would_pass_it(
    server: FakeServer, tmp_path: Path, history: History
) -> None:
    price = Price(1000.0, 1000.0)  # $ per million tokens: one run of 64 + 8 tokens is $0.072
    s = settings(server)
    assert run_cost_estimate(s, price) == pytest.approx(0.072)
    watcher = Watcher(spec(tmp_path, max_cost_usd=0.1, price=price), s, history, FakeClock(START))
    runs = asyncio.run(watcher.forever(max_runs=5))
    assert runs == 1 and watcher.stopped is not None and "cost limit" in watcher.stopped
    statuses = [x.status for x in watcher.store.slots("w")]
    assert statuses.count("done") == 1 and statuses.count("skipped") == 1
    with pytest.raises(Exception, match="needs a price"):
        Watcher(spec(tmp_path, name="w2", max_cost_usd=0.1), s, history, FakeClock(START))


def _slot(hours: float, speed: float) -> WatchSlot:
    t = (START + timedelta(hours=hours)).isoformat()
    return WatchSlot(due_at=t, status="done", finished_at=t, figures=WatchPoint(output_speed_tok_s=speed, requests=1))


def test_rolling_p50_over_72_hours_beside_the_published_figure() -> None:
    slots = [_slot(0, 1000.0)] + [_slot(3 * i, 1600.0 + i) for i in range(1, 30)]  # the first falls out of 72 h
    now = START + timedelta(hours=87)
    r = rolling_p50([(datetime.fromisoformat(s.due_at), s.figures.output_speed_tok_s) for s in slots if s.figures], now)  # type: ignore[misc]
    assert r.runs == 24 and r.p50 == pytest.approx(1600 + (6 + 29) / 2)
    published = parse_published("1705 tok/s, Artificial Analysis, P50 72 h")
    assert (published.value, published.figure, published.source) == (
        1705.0,
        "output_speed",
        "Artificial Analysis, P50 72 h",
    )
    table = watch_table("w", slots, now, published)
    row = table.rows[0].cells
    assert row[1].value == pytest.approx(r.p50) and row[5].value == pytest.approx(r.p50 / 1705)
    assert any("24 runs over 69.0 h vs 1,705 tok/s" in n for n in table.notes)
    page = watch_html("w", slots, now, published)
    assert "rolling P50, 72 h" in page and "published: 1,705 tok" in page  # plotly writes / as \\u002f
    assert parse_published("220 ms, LLMPerf leaderboard").value == pytest.approx(0.22)
    with pytest.raises(Exception, match="--published|published"):
        parse_published("fast")


@pytest.mark.slow
def test_watch_once_from_cron_and_report(server: FakeServer, tmp_path: Path) -> None:
    env = {**os.environ, "TOKENRACE_HOME": str(tmp_path / "home")}
    base = [sys.executable, "-m", "tokenrace", "watch", "--url", server.base_url, "--profile", "aa-1k",
            "--name", "cron", "--per-day", "1440", "--input-tokens", "64", "--max-tokens", "8",
            "-o", str(tmp_path / "w")]  # fmt: skip
    # 1440 a day: a slot every minute, so one is always due.
    p = subprocess.run([*base, "--once"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "cron: done" in p.stdout
    html = tmp_path / "w.html"
    r = subprocess.run(
        [*base, "--report", "--published", "1705 tok/s, Artificial Analysis, P50 72 h", "--html", str(html)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "rolling P50" in r.stdout and "1 runs over" in r.stdout and html.is_file()
    missing = subprocess.run(
        [sys.executable, "-m", "tokenrace", "watch", "--profile", "aa", "--name", "nope", "--report"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert missing.returncode == 2 and "no watch named 'nope'" in missing.stderr
