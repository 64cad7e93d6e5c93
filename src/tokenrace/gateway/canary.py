"""The canary controller: ramp a new backend through traffic steps, roll back on an SLO breach.

Pure and clock-driven: the gateway records one `Sample` per attempt on the canary or the baseline
and calls `tick(now)` every `eval_interval_s`. Each tick compares the canary, over the current
window, with its SLOs and with the baseline over the same window:

* **Rollback** (weight 0 at once) when the canary breaches: its error rate is above the SLO (or the
  baseline's rate plus the margin) with 95 % confidence (Wilson lower bound, so a single unlucky
  error in 20 requests is not a breach), or its p95 TTFT/TPOT/e2e is above the SLO (or above the
  baseline's by both the ratio and the absolute margin), or its backend's circuit breaker is open.
* **Advance** to the next step when the step has been held `hold_s`, the canary served at least
  `min_requests` in the window, and every check passes on the point estimates. After the last step
  the canary is promoted.

Checks that lack data (no streams for TTFT, a baseline with too few requests) are reported as
`null` and do not block. Every decision keeps the numbers that caused it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tokenrace.gateway import clock
from tokenrace.gateway.config import CanaryConfig
from tokenrace.gateway.views import (
    Action,
    ArmStats,
    CanaryRecord,
    CanaryState,
    CanaryView,
    Check,
    Decision,
    Evaluation,
    Latency,
    NoNumbers,
)
from tokenrace.stats import describe

Arm: TypeAlias = Literal["canary", "baseline"]
Z_95_ONE_SIDED = 1.645
MAX_SAMPLES = 200_000
MAX_DECISIONS = 100
LATENCIES: tuple[Latency, ...] = ("ttft", "tpot", "e2e")
NO_NUMBERS = NoNumbers()


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # monotonic seconds
    ok: bool
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None


def wilson_lower(errors: int, n: int, z: float = Z_95_ONE_SIDED) -> float | None:
    """The lower confidence bound of a proportion; None without data."""
    if n == 0:
        return None
    p = errors / n
    denom = 1 + z * z / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / denom)


def arm_stats(samples: list[Sample]) -> ArmStats:
    """Counts, error rate and p95 latencies (ms) of one arm's window; undefined figures are None."""
    n = len(samples)
    errors = sum(1 for s in samples if not s.ok)
    good = [s for s in samples if s.ok]
    ttft, tpot, e2e = ([v * 1000 for s in good if (v := getattr(s, f"{name}_s")) is not None] for name in LATENCIES)
    return ArmStats(
        requests=n,
        errors=errors,
        error_rate=round(errors / n, 4) if n else None,
        error_rate_low95=_round(wilson_lower(errors, n)),
        ttft_samples=len(ttft),
        ttft_p95_ms=describe(ttft).p95 if ttft else None,
        tpot_samples=len(tpot),
        tpot_p95_ms=describe(tpot).p95 if tpot else None,
        e2e_samples=len(e2e),
        e2e_p95_ms=describe(e2e).p95 if e2e else None,
    )


def _round(x: float | None) -> float | None:
    return round(x, 4) if x is not None else None


class Canary:
    def __init__(self, route: str, config: CanaryConfig, now: float) -> None:
        self.route = route
        self.config = config
        self.state: CanaryState = "running"
        self.step = 0
        self.weight = config.steps[0]
        self.step_started = now
        self._held_logged = False
        self.samples: dict[Arm, deque[Sample]] = {
            "canary": deque(maxlen=MAX_SAMPLES),
            "baseline": deque(maxlen=MAX_SAMPLES),
        }
        self.decisions: deque[Decision] = deque(maxlen=MAX_DECISIONS)
        self.last_eval: Evaluation | None = None
        # Shared state (several instances): samples to ship to the deciding instance (None: keep
        # them here only), the version of the shared record this copy follows (None: not synced),
        # and decisions taken while the shared store was unreachable.
        self.outbox: list[tuple[Arm, Sample]] | None = None
        self.shared_version: int | None = None
        self.unshared: list[Decision] = []
        self.instance: str | None = None
        self._decide("start", self.weight, f"canary starts at step 1 of {len(config.steps)}", "config", NO_NUMBERS)

    @property
    def window_s(self) -> float:
        return self.config.window_s if self.config.window_s is not None else self.config.hold_s

    def record(self, arm: Arm, sample: Sample) -> None:
        self.samples[arm].append(sample)
        if self.outbox is not None:
            self.outbox.append((arm, sample))

    # -- automatic ----------------------------------------------------------------------

    def tick(self, now: float, breaker_open: str | None = None) -> Decision | None:
        """Evaluate the window; returns the decision taken, if any."""
        if self.state in ("rolled_back", "promoted"):
            return None
        numbers = self.evaluate(now)
        self.last_eval = numbers
        if breaker_open is not None:
            return self._rollback(f"canary backend breaker open: {breaker_open}", "auto", numbers)
        breaches = [c for c in numbers.checks if c.breach]
        if breaches:
            return self._rollback("; ".join(c.why for c in breaches), "auto", numbers)
        if self.state != "running" or now - self.step_started < self.config.hold_s:
            return None
        return self._after_hold(now, numbers)

    def _after_hold(self, now: float, numbers: Evaluation) -> Decision | None:
        n = numbers.canary.requests
        if n < self.config.min_requests:
            if self._held_logged:
                return None
            self._held_logged = True
            why = f"held {self.config.hold_s:g} s but only {n} canary requests (< min_requests {self.config.min_requests})"
            return self._decide("hold", self.weight, why, "auto", numbers)
        failing = [c for c in numbers.checks if c.passed is False]
        if failing:
            if not self._held_logged:
                self._held_logged = True
                return self._decide("hold", self.weight, "; ".join(c.why for c in failing), "auto", numbers)
            return None
        if self.step + 1 >= len(self.config.steps):
            self.state = "promoted"
            return self._decide(
                "promote", 100.0, f"held {self.config.hold_s:g} s at the last step within SLOs", "auto", numbers
            )
        self._go_to_step(self.step + 1, now)
        return self._decide(
            "advance",
            self.weight,
            f"held {self.config.hold_s:g} s within SLOs and margins ({n} canary requests)",
            "auto",
            numbers,
            old=self.config.steps[self.step - 1],
        )

    def evaluate(self, now: float) -> Evaluation:
        start = max(self.step_started, now - self.window_s)
        canary = self._window("canary", start)
        baseline = self._window("baseline", start)
        c, b = arm_stats(canary), arm_stats(baseline)
        return Evaluation(
            window_s=round(now - start, 3),
            step=self.step + 1,
            weight_pct=self.weight,
            canary=c,
            baseline=b,
            checks=self._checks(c, b),
        )

    def _window(self, arm: Arm, start: float) -> list[Sample]:
        q = self.samples[arm]
        while q and q[0].t < start:
            q.popleft()
        return list(q)

    # -- checks ---------------------------------------------------------------------------

    def _checks(self, c: ArmStats, b: ArmStats) -> list[Check]:
        """Each check: pass (point estimate within limit; None = no data) and breach (rollback)."""
        slo, margin, need = self.config.slo, self.config.margin, self.config.min_requests
        checks: list[Check] = []
        enough_c = c.requests >= need
        if slo.error_rate is not None:
            checks.append(_rate_check("error_rate vs SLO", c, slo.error_rate, enough_c))
        if b.requests >= need and b.error_rate is not None:
            checks.append(_rate_check("error_rate vs baseline", c, b.error_rate + margin.error_rate, enough_c))
        for name in LATENCIES:
            limit = getattr(slo, f"{name}_p95_ms")
            samples, p95 = c.latency(name)
            value = p95 if samples >= need else None
            if limit is not None:
                checks.append(_latency_check(f"{name}_p95_ms vs SLO", value, limit, limit))
            base_samples, base_p95 = b.latency(name)
            base = base_p95 if base_samples >= need else None
            if base is not None:
                bar = max(base * margin.latency_ratio, base + margin.latency_ms)
                checks.append(_latency_check(f"{name}_p95_ms vs baseline", value, bar, base))
        return checks

    # -- by hand --------------------------------------------------------------------------

    def admin(self, action: str, now: float) -> Decision:
        """pause | resume | promote | rollback. Raises ValueError for an action that does not apply."""
        if action == "rollback":
            return self._rollback("rolled back by hand", "admin", self.evaluate(now))
        if action == "promote":
            old = self.weight
            self.state = "promoted"
            self.weight = 100.0
            return self._decide("promote", 100.0, "promoted by hand", "admin", self.evaluate(now), old=old)
        if action == "pause":
            if self.state != "running":
                raise ValueError(f"cannot pause: the canary is {self.state}")
            self.state = "paused"
            return self._decide("pause", self.weight, "paused by hand (breaches still roll back)", "admin", NO_NUMBERS)
        if action == "resume":
            return self._resume(now)
        raise ValueError(f"unknown action {action!r} (pause, resume, promote, rollback)")

    def _resume(self, now: float) -> Decision:
        if self.state == "running":
            raise ValueError("cannot resume: the canary is already running")
        old = self.weight
        if self.state in ("rolled_back", "promoted"):
            self._go_to_step(0, now)
            why = f"restarted by hand at step 1 ({self.weight:g} %)"
        else:
            self.step_started = now
            why = f"resumed by hand at step {self.step + 1} ({self.weight:g} %); the hold restarts"
        self.state = "running"
        return self._decide("resume", self.weight, why, "admin", NO_NUMBERS, old=old)

    # -- state changes --------------------------------------------------------------------

    def _go_to_step(self, step: int, now: float) -> None:
        self.step = step
        self.weight = self.config.steps[step]
        self.step_started = now
        self._held_logged = False

    def _rollback(self, why: str, by: str, numbers: Evaluation) -> Decision:
        old = self.weight
        self.state = "rolled_back"
        self.weight = 0.0
        return self._decide("rollback", 0.0, why, by, numbers, old=old)

    def _decide(
        self,
        action: Action,
        to: float,
        why: str,
        by: str,
        numbers: Evaluation | NoNumbers,
        old: float | None = None,
    ) -> Decision:
        decision = Decision(
            at_unix=clock.wall(),
            action=action,
            from_weight=self.weight if old is None else old,
            to_weight=to,
            reason=why,
            by=by,
            numbers=numbers,
            instance=self.instance,
        )
        self.decisions.append(decision)
        return decision

    # -- sharing with other instances -------------------------------------------------------

    def shared_record(self, now: float, wall: float) -> CanaryRecord:
        """Where the ramp stands, for the instances that follow (times on the wall clock)."""
        return CanaryRecord(
            state=self.state,
            step=self.step,
            weight=self.weight,
            step_started_unix=wall - (now - self.step_started),
            held_logged=self._held_logged,
        )

    def adopt(self, record: CanaryRecord, decisions: list[Decision], now: float, wall: float) -> None:
        """Follow the ramp another instance decided."""
        self.state = record.state
        self.step = record.step
        self.weight = record.weight
        self.step_started = now - (wall - record.step_started_unix)
        self._held_logged = record.held_logged
        self.decisions.clear()
        self.decisions.extend(decisions[-MAX_DECISIONS:])

    def snapshot(self, now: float, backend: str | None = None) -> CanaryView:
        """Where the canary stands; `backend` (its target's label) is shown in /admin/state."""
        view = CanaryView(
            state=self.state,
            weight_pct=self.weight,
            step=self.step + 1,
            steps_pct=list(self.config.steps),
            step_age_s=round(now - self.step_started, 3),
            hold_s=self.config.hold_s,
            window_s=self.window_s,
            min_requests=self.config.min_requests,
            last_evaluation=self.last_eval,
            decisions=list(self.decisions),
        )
        if backend is not None:
            view.backend = backend
        return view


def _rate_check(name: str, c: ArmStats, limit: float, enough: bool) -> Check:
    rate, low = c.error_rate, c.error_rate_low95
    ok = None if not enough or rate is None else rate <= limit
    breach = enough and low is not None and low > limit
    why = f"{name}: {_fmt(rate)} (95% low {_fmt(low)}, n={c.requests}) vs limit {limit:.4g}"
    return Check(check=name, value=rate, low95=low, limit=round(limit, 6), passed=ok, breach=breach, why=why)


def _latency_check(name: str, value: float | None, limit: float, reference: float) -> Check:
    ok = None if value is None else value <= limit
    why = f"{name}: {_fmt(value)} ms vs limit {limit:.4g} ms" + (
        f" (baseline {reference:.4g} ms)" if reference != limit else ""
    )
    return Check(check=name, value=value, limit=round(limit, 4), passed=ok, breach=ok is False, why=why)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"
