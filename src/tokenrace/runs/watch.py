"""`tokenrace watch`: a reference profile repeated on a schedule against a hosted API, as Artificial
Analysis watches one (8 runs a day at random minutes, a headline P50 over 72 hours).

The schedule lives in the history's SQLite file (tables `watches` and `watch_slots`), not in the
process: each day is cut into `per_day` equal windows and one minute is drawn at random in each,
from a generator seeded by the watch's name, its seed and the date, and the slots are written down
before they are due. A watch started again (after a reboot, or from cron with `--once`) reads the
same slots and goes on; a slot missed while nothing ran is marked `missed`, and only the latest due
slot runs, so a restart never sends a burst. Every run is a run directory, indexed in the history
like any other, and its figures are kept with its slot for `watch --report`.

`--max-cost`: before each run its cost is estimated at the price (requests x (prompt tokens x input
price + max_tokens x output price)); a run that would take the watch's spending past the limit is
not sent (its slot is `skipped`) and the watch stops. What a run cost is read back from its summary
when the price made one, else the estimate stands.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Protocol

from pydantic import TypeAdapter

from tokenrace.errors import InvalidInput, TokenraceError
from tokenrace.figures.cost import Price
from tokenrace.load.profiles import Profile, profile
from tokenrace.model.history import WatchPoint, WatchSlot
from tokenrace.model.summary import Summary
from tokenrace.runs.history import History, index_quietly
from tokenrace.runs.session import BenchSession, BenchSettings

DEFAULT_PER_DAY = 8  # Artificial Analysis: 8 times a day, about every 3 hours
DAYS_AHEAD = 1  # slots are written down for today and this many days after

_SCHEMA = """
CREATE TABLE IF NOT EXISTS watches (
    name TEXT PRIMARY KEY, profile TEXT NOT NULL, endpoint TEXT, model TEXT, per_day INTEGER NOT NULL,
    seed INTEGER NOT NULL, max_cost_usd REAL, directory TEXT NOT NULL, created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS watch_slots (
    watch TEXT NOT NULL, due_at TEXT NOT NULL, status TEXT NOT NULL, run_path TEXT, usd REAL,
    finished_at TEXT, figures TEXT, note TEXT, PRIMARY KEY (watch, due_at)
);
"""
_POINT = TypeAdapter(WatchPoint)


class Clock(Protocol):
    """What the watch asks of time; the tests give one that never waits."""

    def now(self) -> datetime: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(frozen=True, slots=True)
class WatchSpec:
    name: str
    profile: str
    per_day: int = DEFAULT_PER_DAY
    seed: int = 0
    max_cost_usd: float | None = None
    price: Price | None = None  # $ per million tokens: needed by max_cost_usd
    directory: Path = Path("runs")

    def validate(self) -> Profile:
        p = profile(self.profile)
        if p.concurrencies is not None:
            raise InvalidInput("profile", f"{p.name} is a sweep; watch repeats one run (aa, aa-1k, llmperf, ...)")
        if not 1 <= self.per_day <= 1440:
            raise InvalidInput("per_day", f"must be between 1 and 1440 runs a day, got {self.per_day}")
        if self.max_cost_usd is not None and not self.max_cost_usd > 0:
            raise InvalidInput("max_cost", f"must be a positive number of dollars, got {self.max_cost_usd}")
        if self.max_cost_usd is not None and self.price is None:
            raise InvalidInput("max_cost", "needs a price: none is known for this endpoint (give one)")
        return p


def day_slots(name: str, seed: int, day: date, per_day: int) -> list[datetime]:
    """The day's slots: one random minute in each of `per_day` equal windows (UTC), the same for the
    same name, seed and day."""
    rng = random.Random(f"{name}:{seed}:{day.isoformat()}")
    window = 1440 // per_day
    midnight = datetime.combine(day, datetime.min.time(), UTC)
    return [midnight + timedelta(minutes=i * window + rng.randrange(window)) for i in range(per_day)]


def run_cost_estimate(s: BenchSettings, price: Price | None) -> float | None:
    """What one run may cost at most: requests x (prompt tokens x input price + max_tokens x output)."""
    if price is None:
        return None
    requests = (s.load.requests or 1) + int(s.load.cold) + s.load.warmup
    prompt = s.prompts.input_tokens[0] if s.prompts.input_tokens else 0
    output = s.request.max_tokens or 0
    return requests * (prompt * price.input_per_m + output * price.output_per_m) / 1e6


def point_of(summary: Summary) -> WatchPoint:
    """The figures of one run that the watch follows: its reference's P50s."""
    ref = summary.reference
    if ref is not None and ref.aa is not None:
        return WatchPoint(
            output_speed_tok_s=ref.aa.output_speed_tok_s.p50,
            ttft_s=ref.aa.ttft_s.p50,
            e2e_100_tokens_s=ref.aa.e2e_100_tokens_s.p50,
            requests=ref.aa.ttft_s.count,
        )
    if ref is not None and ref.llmperf is not None:
        return WatchPoint(
            output_speed_tok_s=ref.llmperf.request_output_throughput_token_per_s.p50,
            ttft_s=ref.llmperf.ttft_s.p50,
            requests=ref.llmperf.num_completed_requests,
        )
    return WatchPoint(requests=summary.requests.succeeded)


class WatchStore:
    """The watch's definition and slots in the history's SQLite file."""

    def __init__(self, history: History) -> None:
        self.conn = history.conn
        with self.conn:
            self.conn.executescript(_SCHEMA)

    def define(self, spec: WatchSpec, endpoint: str | None, model: str | None, now: datetime) -> Path:
        """Write the watch down, or check that the one already there is the same watch; returns the
        directory its runs go to (the first run's choice stays)."""
        row = self.conn.execute("SELECT * FROM watches WHERE name = ?", (spec.name,)).fetchone()
        if row is None:
            with self.conn:
                self.conn.execute(
                    "INSERT INTO watches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        spec.name,
                        spec.profile,
                        endpoint,
                        model,
                        spec.per_day,
                        spec.seed,
                        spec.max_cost_usd,
                        str(spec.directory.resolve()),
                        now.isoformat(),
                    ),
                )
            return spec.directory.resolve()
        same = (row["profile"], row["per_day"], row["seed"]) == (spec.profile, spec.per_day, spec.seed)
        if not same:
            raise InvalidInput(
                "name",
                f"the watch {spec.name!r} runs {row['profile']} {row['per_day']} times a day (seed {row['seed']}); "
                "choose another name for another schedule",
            )
        if spec.max_cost_usd != row["max_cost_usd"]:
            with self.conn:
                self.conn.execute("UPDATE watches SET max_cost_usd = ? WHERE name = ?", (spec.max_cost_usd, spec.name))
        return Path(row["directory"])

    def plan(self, spec: WatchSpec, now: datetime) -> None:
        """Write down the slots of today and the next days (those already written stay as they are)."""
        today = now.astimezone(UTC).date()
        with self.conn:
            for d in range(DAYS_AHEAD + 1):
                for due in day_slots(spec.name, spec.seed, today + timedelta(days=d), spec.per_day):
                    self.conn.execute(
                        "INSERT OR IGNORE INTO watch_slots (watch, due_at, status) VALUES (?, ?, 'planned')",
                        (spec.name, due.isoformat()),
                    )

    def due(self, name: str, now: datetime) -> WatchSlot | None:
        """The latest planned slot that is due; the earlier due ones are marked missed."""
        rows = self.conn.execute(
            "SELECT * FROM watch_slots WHERE watch = ? AND status = 'planned' AND due_at <= ? ORDER BY due_at",
            (name, now.isoformat()),
        ).fetchall()
        if not rows:
            return None
        with self.conn:
            for r in rows[:-1]:
                self.conn.execute(
                    "UPDATE watch_slots SET status = 'missed', note = 'nothing ran at its time' "
                    "WHERE watch = ? AND due_at = ?",
                    (name, r["due_at"]),
                )
        return _slot(rows[-1])

    def next_planned(self, name: str, now: datetime) -> datetime | None:
        row = self.conn.execute(
            "SELECT due_at FROM watch_slots WHERE watch = ? AND status = 'planned' AND due_at > ? "
            "ORDER BY due_at LIMIT 1",
            (name, now.isoformat()),
        ).fetchone()
        return datetime.fromisoformat(row["due_at"]) if row else None

    def finish(self, name: str, slot: WatchSlot) -> None:
        with self.conn:
            self.conn.execute(
                "UPDATE watch_slots SET status = ?, run_path = ?, usd = ?, finished_at = ?, figures = ?, note = ? "
                "WHERE watch = ? AND due_at = ?",
                (
                    slot.status,
                    slot.run_path,
                    slot.usd,
                    slot.finished_at,
                    _POINT.dump_json(slot.figures).decode() if slot.figures is not None else None,
                    slot.note,
                    name,
                    slot.due_at,
                ),
            )

    def spent(self, name: str) -> float:
        row = self.conn.execute("SELECT SUM(usd) AS usd FROM watch_slots WHERE watch = ?", (name,)).fetchone()
        return float(row["usd"] or 0.0)

    def slots(self, name: str) -> list[WatchSlot]:
        rows = self.conn.execute("SELECT * FROM watch_slots WHERE watch = ? ORDER BY due_at", (name,)).fetchall()
        return [_slot(r) for r in rows]

    def exists(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM watches WHERE name = ?", (name,)).fetchone() is not None


def _slot(r: sqlite3.Row) -> WatchSlot:
    figures = _POINT.validate_json(r["figures"]) if r["figures"] else None
    return WatchSlot(
        due_at=r["due_at"],
        status=r["status"],
        run_path=r["run_path"],
        usd=r["usd"],
        finished_at=r["finished_at"],
        figures=figures,
        note=r["note"],
    )


class Watcher:
    """Runs a watch's due slots: `once()` for cron, `forever()` for a process that stays."""

    def __init__(
        self,
        spec: WatchSpec,
        template: BenchSettings,
        history: History,
        clock: Clock | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        spec.validate()
        self.spec = spec
        self.template = template
        self.clock = clock or SystemClock()
        self.store = WatchStore(history)
        self.notify = notify or (lambda _: None)
        base_url = template.endpoint.base_url if template.endpoint else None
        now = self.clock.now()
        self.directory = self.store.define(spec, base_url, template.model, now)
        self.store.plan(spec, now)
        self.stopped: str | None = None  # why the watch stopped by itself (the cost limit)

    async def once(self) -> WatchSlot | None:
        """Run the latest due slot, if one is due; None when none was."""
        now = self.clock.now()
        self.store.plan(self.spec, now)
        slot = self.store.due(self.spec.name, now)
        if slot is None:
            return None
        estimate = run_cost_estimate(self.template, self.spec.price)
        spent = self.store.spent(self.spec.name)
        limit = self.spec.max_cost_usd
        if limit is not None and estimate is not None and spent + estimate > limit:
            slot = slot.model_copy(
                update={
                    "status": "skipped",
                    "note": f"the cost limit: ${spent:.4f} spent, this run up to ${estimate:.4f}, limit ${limit:.4f}",
                }
            )
            self.store.finish(self.spec.name, slot)
            self.stopped = slot.note
            return slot
        stamp = datetime.fromisoformat(slot.due_at).strftime("%Y%m%dT%H%MZ")
        settings = dataclasses.replace(self.template, output=self.directory / stamp, label=self.spec.name)
        self.notify(f"{self.spec.name}: run due at {slot.due_at}")
        try:
            result = await BenchSession(settings).run()
        except TokenraceError as exc:
            slot = slot.model_copy(update={"status": "failed", "note": str(exc), "usd": None})
            self.store.finish(self.spec.name, slot)
            return slot
        index_quietly(result.directory)
        cost = result.summary.cost
        usd = cost.usd_total if cost is not None and cost.usd_total is not None else estimate
        ok = result.summary.requests.succeeded > 0 and not result.interrupted
        slot = slot.model_copy(
            update={
                "status": "done" if ok else "failed",
                "run_path": str(result.directory),
                "usd": usd,
                "finished_at": self.clock.now().isoformat(),
                "figures": point_of(result.summary),
                "note": None if ok else "no request succeeded",
            }
        )
        self.store.finish(self.spec.name, slot)
        return slot

    async def forever(self, max_runs: int | None = None) -> int:
        """Run each slot as it comes due, sleeping in between; returns the runs made (stops at
        `max_runs`, or when the cost limit stops the watch)."""
        runs = 0
        while max_runs is None or runs < max_runs:
            slot = await self.once()
            if slot is not None:
                runs += slot.status in ("done", "failed")
                if self.stopped:
                    break
                continue
            now = self.clock.now()
            self.store.plan(self.spec, now)
            nxt = self.store.next_planned(self.spec.name, now)
            wait = (nxt - now).total_seconds() if nxt is not None else 3600.0
            self.notify(f"{self.spec.name}: next run at {nxt.isoformat() if nxt else 'unknown'}")
            await self.clock.sleep(max(wait, 0.0) + 0.001)
        return runs
