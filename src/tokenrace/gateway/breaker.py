"""A circuit breaker per backend: closed -> open -> half-open -> closed (or open again).

Pure and clock-driven (times are the gateway clock's `monotonic()` seconds passed in by the caller), so the tests
walk through every transition without sleeping. The open state remembers why it opened and until
when, for `/metrics` and `GET /admin/state`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TypeAlias

from tokenrace.gateway import clock
from tokenrace.gateway.config import BreakerConfig
from tokenrace.gateway.views import BreakerRecord, BreakerState, BreakerView, BreakerWindow

State: TypeAlias = BreakerState
STATE_CODES: dict[State, int] = {"closed": 0, "half_open": 1, "open": 2}
BUCKET_S = 0.25  # resolution of the error-rate window


@dataclass(frozen=True, slots=True)
class Transition:
    backend: str
    old: State
    new: State
    reason: str


class Breaker:
    """Decides whether a backend may take a request, from the outcomes of the last ones."""

    def __init__(self, backend: str, config: BreakerConfig) -> None:
        self.backend = backend
        self.config = config
        self.state: State = "closed"
        self.reason = ""
        self.since = clock.wall()  # wall clock, for people
        self.open_until: float | None = None  # monotonic
        self.consecutive = 0
        # The error-rate window in buckets of BUCKET_S: memory stays bounded at any request rate.
        self._window: deque[list[float]] = deque()  # [bucket start, requests, errors]
        self._window_requests = 0
        self._window_errors = 0
        self._probes_out = 0
        self.last_transition: Transition | None = None

    # -- asking --------------------------------------------------------------------------

    def allow(self, now: float) -> bool:
        """May a request go to this backend now? A half-open breaker admits `probes` at a time."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if self.open_until is not None and now < self.open_until:
                return False
            self._move("half_open", f"probing after {self.config.open_s:g} s open", now)
        if self._probes_out >= self.config.probes:
            return False
        self._probes_out += 1
        return True

    def refresh(self, now: float) -> State:
        """The state as of `now` (an expired open period reads as half-open)."""
        if self.state == "open" and self.open_until is not None and now >= self.open_until:
            self._move("half_open", f"probing after {self.config.open_s:g} s open", now)
        return self.state

    # -- telling -------------------------------------------------------------------------

    def record(self, ok: bool, now: float, kind: str = "") -> Transition | None:
        """The outcome of one request that `allow` admitted. Returns the transition it caused."""
        before = self.last_transition
        self._add_to_window(ok, now)
        if self.state == "half_open":
            self._probes_out = max(0, self._probes_out - 1)
            if ok:
                self._close(now)
            else:
                self._open(f"probe failed ({kind or 'error'})", now)
        elif ok:
            self.consecutive = 0
        else:
            self.consecutive += 1
            self._maybe_open(kind, now)
        return self.last_transition if self.last_transition is not before else None

    def release_probe(self) -> None:
        """An admitted request ended with no verdict on the backend (e.g. the client left)."""
        if self.state == "half_open":
            self._probes_out = max(0, self._probes_out - 1)

    def force(self, state: State, reason: str, now: float) -> None:
        if state == "open":
            self._open(reason, now)
        elif state == "closed":
            self._close(now, reason)
        else:
            self._move("half_open", reason, now)

    # -- inside --------------------------------------------------------------------------

    def _maybe_open(self, kind: str, now: float) -> None:
        if self.state != "closed":
            return
        c = self.config
        if self.consecutive >= c.failures:
            self._open(f"{self.consecutive} consecutive failures (last: {kind or 'error'})", now)
            return
        n = self._window_requests
        if c.error_rate is not None and n >= c.min_requests and self._window_errors / n >= c.error_rate:
            rate = self._window_errors / n
            self._open(
                f"error rate {rate:.2f} >= {c.error_rate:g} over the last {c.window_s:g} s ({self._window_errors}/{n} requests)",
                now,
            )

    def _add_to_window(self, ok: bool, now: float) -> None:
        window = self._window
        start = now - now % BUCKET_S
        if window and window[-1][0] == start:
            bucket = window[-1]
        else:
            bucket = [start, 0, 0]
            window.append(bucket)
        bucket[1] += 1
        self._window_requests += 1
        if not ok:
            bucket[2] += 1
            self._window_errors += 1
        horizon = now - self.config.window_s
        while window and window[0][0] + BUCKET_S <= horizon:
            _, n, errors = window.popleft()
            self._window_requests -= int(n)
            self._window_errors -= int(errors)

    def _open(self, reason: str, now: float) -> None:
        self.open_until = now + self.config.open_s
        self._probes_out = 0
        self._move("open", reason, now)

    def _close(self, now: float, reason: str = "probe succeeded") -> None:
        self.consecutive = 0
        self.open_until = None
        self._probes_out = 0
        self._window.clear()
        self._window_requests = 0
        self._window_errors = 0
        self._move("closed", reason, now)

    def _move(self, new: State, reason: str, now: float) -> None:
        old = self.state
        self.state = new
        self.reason = reason
        self.since = clock.wall()
        self.last_transition = Transition(self.backend, old, new, reason)

    # -- sharing with other instances -----------------------------------------------------

    def shared_record(self, now: float, wall: float, by: str) -> BreakerRecord:
        """The state other instances adopt: which, why, since and until when (wall clock), by whom."""
        until = wall + (self.open_until - now) if self.state == "open" and self.open_until is not None else None
        return BreakerRecord(state=self.state, reason=self.reason, since_unix=self.since, open_until_unix=until, by=by)

    def adopt(self, state: State, reason: str, open_until_unix: float | None, now: float, wall: float) -> Transition:
        """Take the state another instance reached (its failure counts stay its own)."""
        self.force(state, reason, now)
        if state == "open" and open_until_unix is not None:
            self.open_until = now + (open_until_unix - wall)
        assert self.last_transition is not None
        return self.last_transition

    # -- reporting -----------------------------------------------------------------------

    def window_stats(self) -> tuple[int, int]:
        return self._window_requests, self._window_errors

    def snapshot(self, now: float) -> BreakerView:
        """The state for GET /admin/state: which, why, since and until when (wall clock)."""
        state = self.refresh(now)
        n, errors = self.window_stats()
        until = None
        if state == "open" and self.open_until is not None:
            until = clock.wall() + (self.open_until - now)
        return BreakerView(
            state=state,
            reason=self.reason or None,
            since_unix=round(self.since, 3),
            open_until_unix=round(until, 3) if until is not None else None,
            consecutive_failures=self.consecutive,
            window=BreakerWindow(
                seconds=self.config.window_s,
                requests=n,
                errors=errors,
                error_rate=round(errors / n, 4) if n else None,
            ),
        )
