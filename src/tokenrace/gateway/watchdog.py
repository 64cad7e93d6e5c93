"""One timer per upstream attempt for its first-byte, idle and total limits.

Re-arming an `asyncio.timeout` for every chunk would push a timer per chunk; this watchdog keeps one
timer and, when it fires early (the deadline moved on since), re-arms itself for the new deadline.
A chunk costs one clock read. When a limit is really reached it cancels the task, and the caller
turns the CancelledError into a timeout with `expired()`.
"""

from __future__ import annotations

import asyncio
import math
from typing import Literal, TypeAlias

Limit: TypeAlias = Literal["first_byte", "idle", "total", "client_write"]
# While the client is slow to take bytes the upstream is not being read, so its idle limit must not
# fire; the write itself is bounded by the caller (`client_write_s`).
INF = math.inf


class Watchdog:
    __slots__ = (
        "_loop",
        "_task",
        "_first_byte_s",
        "_idle_s",
        "_total_at",
        "_due",
        "_armed_at",
        "_handle",
        "phase",
        "fired",
    )

    def __init__(self, first_byte_s: float | None, idle_s: float | None, total_s: float | None) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        now = self._loop.time()
        self._first_byte_s = first_byte_s or INF
        self._idle_s = idle_s or INF
        self._total_at = now + total_s if total_s else INF
        self.phase: Limit = "first_byte"
        self._due = now + self._first_byte_s
        self._armed_at = INF
        self._handle: asyncio.TimerHandle | None = None
        self.fired: Limit | None = None
        self._arm()

    def _deadline(self) -> float:
        return min(self._due, self._total_at)

    def _arm(self) -> None:
        at = self._deadline()
        if at < self._armed_at:
            if self._handle is not None:
                self._handle.cancel()
            self._armed_at = at
            self._handle = self._loop.call_at(at, self._fire) if at < INF else None

    def _fire(self) -> None:
        self._handle = None
        self._armed_at = INF
        at = self._deadline()
        if self._loop.time() < at:
            self._arm()  # the deadline moved on since this timer was set
            return
        self.fired = "total" if at == self._total_at else self.phase
        self._task.cancel()

    # -- called by the proxy ------------------------------------------------------------------

    def reading(self) -> None:
        """About to wait for more upstream bytes (after the first): the idle limit starts now."""
        self.phase = "idle"
        self._due = self._loop.time() + self._idle_s
        if self._due < self._armed_at:
            self._arm()

    def hold(self) -> None:
        """A slow write to the client starts; upstream limits wait (the caller bounds the write)."""
        self.phase = "client_write"
        self._due = INF

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def expired(self) -> Limit | None:
        """After a CancelledError: the limit that caused it (and the cancel is absorbed), or None."""
        if self.fired is None:
            return None
        self._task.uncancel()
        return self.fired
