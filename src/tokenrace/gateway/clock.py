"""The gateway's clock: what its timers read (breakers, rate limits, canary steps and holds, the
state shared between instances), so that a test moves time forward instead of sleeping.

The request path and the timers call `monotonic()` (seconds, for intervals and deadlines) and
`wall()` (Unix seconds, for what people and other instances read) here rather than `time`'s. A test
hands the gateway another `Clock` with `use()`: one that runs with the real clock plus the time the
test adds, so an open breaker's cooldown or a refilling token bucket comes due at once. Waits on
real I/O (a drain, a worker's start, a Redis lease kept on Redis's own clock) keep `time`'s.
"""

from __future__ import annotations

import time


class Clock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


_clock = Clock()


def monotonic() -> float:
    return _clock.monotonic()


def wall() -> float:
    return _clock.wall()


def use(clock: Clock) -> Clock:
    """Make `clock` the gateway's clock (every gateway in this process); returns the one it replaces."""
    global _clock
    previous, _clock = _clock, clock
    return previous
