"""The claim battery: the guides' procedure run as one, within a time budget (docs/claim.md).

In order, each a full run directory under the claim's directory:

1. `warm/`: one cold request alone, then warm requests one at a time with short prompts - the
   cold condition and the baseline.
2. `concurrency/`: the SLA search over concurrency with the expectations as objectives (a sweep
   directory); one condition per concurrency measured.
3. `prompt-<N>/`: prompts of N tokens, short to long (doubling, capped by the model's context),
   one at a time; the ladder stops at the first length that fails.
4. `cache-busted/`, `cache-shared/`: the same prompt size with every prefix unique, and behind one
   shared prefix the server may cache.
5. `content-<kind>/`: what the model is asked to write (natural, copy, random), one at a time.
6. `repeated-prompt/`: one prompt sent again and again, against the baseline's distinct prompts
   (MLPerf's TEST04); the answers of every run are then checked for TEST06 and TEST09
   (claim/compliance.py).
7. `drift/`: the baseline again in the budget's last part.
8. `quality/`: a quality pass on the same endpoint when asked, reported beside and never mixed in.

claim.json is rewritten after every condition, so Ctrl-C keeps what finished and a partial verdict.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tokenrace import __version__
from tokenrace.claim import compliance
from tokenrace.claim.models import (
    CLAIM_FILE,
    ClaimFile,
    Condition,
    ConditionFigures,
    DriftRatios,
    PlannedStep,
)
from tokenrace.claim.quality import quality_condition
from tokenrace.claim.verdict import decide, outcome_of
from tokenrace.errors import InvalidInput
from tokenrace.figures.cost import Price
from tokenrace.figures.objectives import (
    Check,
    Objective,
    Sample,
    all_held,
    decided,
    error_guard,
    judge_all,
    look_confidence,
    requests_to_decide,
    still_needed,
)
from tokenrace.load.content import KINDS as CONTENT_KINDS
from tokenrace.load.runner import Load
from tokenrace.load.workload import WorkloadSpec
from tokenrace.model.claim import Dimension
from tokenrace.model.run import StepRow, SweepFile
from tokenrace.model.summary import Summary
from tokenrace.runs.history import index_quietly
from tokenrace.runs.run import Run
from tokenrace.runs.samples import sample_of
from tokenrace.runs.settings import BenchSettings, PromptSpec
from tokenrace.runs.store import default_run_dir, write_json
from tokenrace.stats import CONFIDENCE, bounding_requests
from tokenrace.sweep.runner import ProgressFor, StepRunner, SweepPlan, run_sweep

MIN_BUDGET_S = 20.0  # the cold request and one warm step, on a fast server, with the run's own overheads
# Shares of the budget; drift takes the last part, whatever the others left. The compliance run
# (TEST04's repeated prompt, about as many requests as the baseline's first run) took its 4 % from
# prompt length and the cache, 2 % each: the baseline and the concurrency search matter more.
SHARES = {
    "warm": 0.15,
    "concurrency": 0.25,
    "prompt_tokens": 0.18,
    "cache": 0.08,
    "content": 0.05,
    "compliance": 0.04,
    "quality": 0.10,
    "drift": 0.15,
}
WARM_REQUESTS = 10  # the least the baseline sends, whatever the objectives need
LADDER_REQUESTS = 6  # the least any other condition sends
LOOKS = 3  # checks of a condition's evidence, planned in advance; the confidence is split between them
SEARCH_LOOKS = 2  # the concurrency search: a value's first run and one repeat
DRIFT_SEED_OFFSET = 1000
MAX_CONDITION_REQUESTS = 5000  # a condition's planned requests, at most (a p99.9 at 0.99 wants 4603)
SHORT_PROMPT = 128
CACHE_PROMPT = 1024
SEARCH_STEPS = 8
Notify = Callable[[str], None]


@dataclass(slots=True)
class ClaimSettings:
    template: BenchSettings  # the endpoint, the request options and the claim's directory (output)
    expectations: tuple[Objective, ...]
    budget_s: float
    max_requests: int | None = None
    max_cost_usd: float | None = None
    price: Price | None = None  # $ per million tokens, for --max-cost
    context_tokens: int | None = None  # the model's context, when the server does not say
    quality_samples: int | None = None
    max_concurrency: int = 64
    max_prompt_tokens: int = 32768
    max_error_rate: float = 0.05
    confidence: float = CONFIDENCE

    def validate(self) -> None:
        if not 0.5 < self.confidence < 1:
            raise InvalidInput("confidence", f"must lie between 0.5 and 1 (e.g. 0.95), got {self.confidence:g}")
        if not self.expectations:
            raise InvalidInput("expect", "give at least one expectation, e.g. ttft_p50<=200ms")
        if not self.budget_s >= MIN_BUDGET_S:
            raise InvalidInput(
                "budget",
                f"{self.budget_s:g} s is too small for even the cold request and one warm step "
                f"(at least {MIN_BUDGET_S:g} s)",
            )
        if self.max_requests is not None and self.max_requests < 1 + WARM_REQUESTS:
            raise InvalidInput("max_requests", f"must allow the cold and warm requests ({1 + WARM_REQUESTS})")
        if self.max_cost_usd is not None and not self.max_cost_usd > 0:
            raise InvalidInput("max_cost", f"must be a positive number of dollars, got {self.max_cost_usd}")
        if self.max_cost_usd is not None and self.price is None:
            raise InvalidInput("max_cost", "needs a price: none is known for this endpoint (give one)")
        if self.context_tokens is not None and self.context_tokens < SHORT_PROMPT * 2:
            raise InvalidInput("context", f"must be at least {SHORT_PROMPT * 2} tokens, got {self.context_tokens}")

    @property
    def look_confidence(self) -> float:
        """Each of a condition's LOOKS checks is made at this confidence (docs/claim.md)."""
        return look_confidence(self.confidence, LOOKS)

    @property
    def condition_requests(self) -> int:
        """The fewest requests that could decide a condition (none over a limit): its first run's size."""
        need = requests_to_decide(self.expectations, self.look_confidence)
        return min(MAX_CONDITION_REQUESTS, max(LADDER_REQUESTS, need))

    @property
    def search_requests(self) -> int:
        """The same for one run of the concurrency search, whose values are judged up to SEARCH_LOOKS times."""
        need = requests_to_decide(self.expectations, look_confidence(self.confidence, SEARCH_LOOKS))
        return min(MAX_CONDITION_REQUESTS, max(8, need))

    @property
    def repeat_requests(self) -> int:
        """TEST04's run: enough to bound the ratio of two medians at one look's confidence."""
        two_sided = 2 * self.look_confidence - 1
        return max(WARM_REQUESTS, bounding_requests("p50", two_sided) or 0)

    @property
    def objectives(self) -> tuple[Objective, ...]:
        """The expectations, and the error rate unless they name it."""
        if any(o.figure == "error_rate" for o in self.expectations):
            return self.expectations
        return (*self.expectations, error_guard(self.max_error_rate))


# --- the plan ---------------------------------------------------------------------------------------


def plan(cs: ClaimSettings) -> tuple[list[PlannedStep], list[Condition]]:
    """What the battery will send at most, in order, and what it leaves out before starting (request
    and cost limits). Seconds are each part's share of the budget; the last part is the drift's."""
    max_tokens = cs.template.request.max_tokens or 256
    n = cs.condition_requests
    share = cs.budget_s
    steps = [
        PlannedStep(dimension="warm", requests=1 + max(WARM_REQUESTS, n), seconds=share * SHARES["warm"], needed=n),
        PlannedStep(
            dimension="concurrency",
            requests=_search_requests(cs),
            seconds=share * SHARES["concurrency"],
            needed=cs.search_requests,
        ),
        PlannedStep(
            dimension="prompt_tokens",
            requests=n * len(prompt_ladder(cs.max_prompt_tokens)),
            seconds=share * SHARES["prompt_tokens"],
            needed=n,
        ),
        PlannedStep(dimension="cache", requests=2 * n, seconds=share * SHARES["cache"], needed=n),
        PlannedStep(dimension="content", requests=len(CONTENT_KINDS) * n, seconds=share * SHARES["content"], needed=n),
        PlannedStep(
            dimension="compliance",
            requests=1 + cs.repeat_requests,
            seconds=share * SHARES["compliance"],
            needed=cs.repeat_requests,
        ),
        PlannedStep(dimension="drift", requests=max(WARM_REQUESTS, n), seconds=share * SHARES["drift"], needed=n),
    ]
    if cs.quality_samples:
        steps.append(PlannedStep(dimension="quality", requests=cs.quality_samples * 8, seconds=0.0))
    prompt_of = {"prompt_tokens": cs.max_prompt_tokens // 2, "cache": CACHE_PROMPT}

    def price_of(step: PlannedStep) -> float | None:
        if cs.price is None:
            return None
        tokens_in = prompt_of.get(step.dimension, SHORT_PROMPT)
        return step.requests * (tokens_in * cs.price.input_per_m + max_tokens * cs.price.output_per_m) / 1e6

    for s in steps:
        s.usd = _round(price_of(s))
    kept, skipped = [], []
    requests, usd = 0, 0.0
    for s in steps:
        if s.dimension == "concurrency":
            _fit_search(cs, s, requests, usd, price_of)
        over_requests = cs.max_requests is not None and requests + s.requests > cs.max_requests
        over_cost = cs.max_cost_usd is not None and s.usd is not None and usd + s.usd > cs.max_cost_usd
        if s.dimension != "warm" and (over_requests or over_cost):
            why = "the request limit" if over_requests else "the cost limit"
            skipped.append(Condition(dimension=s.dimension, skipped=f"{why}: it would send up to {s.requests} more"))
            continue
        kept.append(s)
        requests += s.requests
        usd += s.usd or 0.0
    return kept, skipped


def _fit_search(
    cs: ClaimSettings, step: PlannedStep, requests: int, usd: float, price_of: Callable[[PlannedStep], float | None]
) -> None:
    """Lower the search's highest concurrency until its worst case fits what the limits leave; it
    stays as planned when even concurrency 2 does not fit (the plan then leaves the search out)."""
    for c in range(cs.max_concurrency, 1, -1):
        step.requests = SEARCH_STEPS * max(cs.search_requests, 4 * c)
        step.usd = _round(price_of(step))
        fits_requests = cs.max_requests is None or requests + step.requests <= cs.max_requests
        fits_cost = cs.max_cost_usd is None or step.usd is None or usd + step.usd <= cs.max_cost_usd
        if fits_requests and fits_cost:
            step.max_concurrency = c
            return
    step.requests = _search_requests(cs)
    step.usd = _round(price_of(step))


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def _search_requests(cs: ClaimSettings) -> int:
    """At most: SEARCH_STEPS runs of max(planned, 4 x c) requests at the highest concurrency tried."""
    return SEARCH_STEPS * max(cs.search_requests, 4 * cs.max_concurrency)


def prompt_ladder(cap: int) -> list[int]:
    """256, 512, 1024, ... up to `cap` tokens: the baseline is the 128-token point."""
    sizes, n = [], 2 * SHORT_PROMPT
    while n <= cap:
        sizes.append(n)
        n *= 2
    return sizes


# --- the battery ------------------------------------------------------------------------------------

# Which undecided conditions the budget left over goes to first.
PRIORITY: tuple[Dimension, ...] = (
    "warm",
    "concurrency",
    "prompt_tokens",
    "cache",
    "content",
    "drift",
    "cold",
    "compliance",
    "quality",
)


@dataclass(slots=True)
class Measured:
    """A condition measured in one or more runs (looks): how its runs are made, and what they show."""

    name: str
    dimension: Dimension
    value: int | str
    prompts: PromptSpec
    workload: WorkloadSpec | None = None
    factor: float = 1.0  # a request's latency over the baseline's (longer prompts prefill longer)
    sample: Sample = field(default_factory=Sample)
    runs: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    index: int | None = None  # its place in claim.conditions
    first: Run | None = None  # its first run (the baseline's holds the cold request)


def _as_event(c: Check) -> Check:
    """A check of one request: its figure held or missed, decided either way."""
    if c.held is None:
        return c
    return dataclasses.replace(c, outcome="held" if c.held else "failed", over=0 if c.held else 1, needed=None)


@dataclass(slots=True)
class Battery:
    cs: ClaimSettings
    progress_for: ProgressFor | None = None
    notify: Notify = lambda line: None
    argv: list[str] | None = None
    directory: Path = field(init=False)
    claim: ClaimFile = field(init=False)
    started_ns: int = 0
    e2e_s: float = 1.0  # a warm request's latency, once measured: what each part's need is estimated from
    context: int | None = None
    planned: dict[Dimension, PlannedStep] = field(default_factory=dict)
    measured: list[Measured] = field(default_factory=list)  # conditions that may be looked at again

    def __post_init__(self) -> None:
        self.cs.validate()
        t = self.cs.template
        self.directory = t.output or default_run_dir(t.label or "claim")
        if (self.directory / CLAIM_FILE).exists():
            raise InvalidInput("output", f"{self.directory} already holds a claim; choose another directory")
        steps, skipped = plan(self.cs)
        self.planned = {s.dimension: s for s in steps}
        self.claim = ClaimFile(
            version=__version__,
            endpoint=t.endpoint.base_url if t.endpoint else None,
            provider=t.endpoint.provider if t.endpoint else None,
            model=t.model,
            directory=str(self.directory),
            budget_s=self.cs.budget_s,
            confidence=self.cs.confidence,
            max_requests=self.cs.max_requests,
            max_cost_usd=self.cs.max_cost_usd,
            expectations=[o.saved() for o in self.cs.expectations],
            plan=steps,
            conditions=skipped,
        )

    # --- time and spending

    def left_s(self) -> float:
        return self.cs.budget_s - (time.perf_counter_ns() - self.started_ns) / 1e9

    def _requests_left(self) -> int | None:
        return None if self.cs.max_requests is None else self.cs.max_requests - self.claim.requests_sent

    def _room(self, dimension: Dimension, need_s: float, requests: int, reserve_s: float = 0.0) -> str | None:
        """None when the part fits; else why it is skipped."""
        if dimension not in self.planned:
            return "left out by the plan"
        left = self.left_s() - reserve_s
        if need_s > left:
            return f"the budget: it needs about {need_s:.0f} s, {max(left, 0):.0f} s were left"
        room = self._requests_left()
        if room is not None and requests > room:
            return f"the request limit: it needs {requests}, {room} were left"
        return None

    def _drift_reserve(self) -> float:
        return self.cs.budget_s * SHARES["drift"] if "drift" in self.planned else 0.0

    # --- running

    async def run(self) -> ClaimFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.started_ns = time.perf_counter_ns()
        self.claim.started_at = datetime.now(UTC).isoformat()
        self._write()
        try:
            parts = (self._warm, self._concurrency, self._prompt_lengths, self._cache, self._content, self._repeated)
            for part in parts:
                if not await part():
                    self.claim.partial = True
                    break
            else:
                if not await self._top_up() or not await self._drift():
                    self.claim.partial = True
                elif self.cs.quality_samples:
                    await self._quality()
        except asyncio.CancelledError:
            self.claim.partial = True  # Ctrl-C between two runs: what finished is kept
            raise
        finally:
            self._finish()
        return self.claim

    def _finish(self) -> None:
        self._judge_answers()
        decide(self.claim)
        self.claim.finished_at = datetime.now(UTC).isoformat()
        self.claim.elapsed_s = round((time.perf_counter_ns() - self.started_ns) / 1e9, 3)
        self._write()
        index_quietly(self.directory)  # `tokenrace runs` lists the claim, its runs beneath it

    def _write(self) -> None:
        write_json(self.directory / CLAIM_FILE, self.claim.model_dump(mode="json"))

    async def _step(
        self,
        name: str,
        load: Load,
        prompts: PromptSpec | None = None,
        workload: WorkloadSpec | None = None,
        look: int = 0,
    ) -> Run:
        template = self.cs.template if workload is None else dataclasses.replace(self.cs.template, workload=workload)
        runner = StepRunner(template, self.directory, self.progress_for, self.argv)
        # A later look at a condition draws fresh prompts: the same seed would send the same ones again.
        seed = None if template.load.seed is None else template.load.seed + look
        result = await runner.run(name, dataclasses.replace(load, seed=seed), prompts)
        self.claim.requests_sent += result.summary.requests.total + (1 if load.cold else 0)
        return result

    def _judged(self, m: Measured, result: Run) -> Condition:
        """The condition as its runs so far show it: checks over every run pooled, at the confidence
        of one of LOOKS looks; the figures are its last run's, `requests` counts them all."""
        checks = judge_all(self.cs.objectives, m.sample, self.cs.look_confidence)
        m.checks = checks
        figures = figures_of(result.summary)
        figures["requests"] = m.sample.measured
        saved = [c.saved() for c in checks]
        return Condition(
            dimension=m.dimension,
            value=m.value,
            # A run cut short by Ctrl-C is kept, but judges nothing.
            held=None if result.interrupted else all_held(checks) if m.sample.measured else False,
            outcome=None if result.interrupted else outcome_of(saved),
            figures=figures,
            checks=saved,
            run_dir=m.runs[0],
            runs=list(m.runs),
            skipped="interrupted before it finished" if result.interrupted else None,
        )

    def _add(self, condition: Condition) -> None:
        self.claim.conditions.append(condition)
        self._write()

    def _skip(self, dimension: Dimension, why: str, value: int | str | None = None) -> None:
        self.notify(f"{dimension}: skipped ({why})")
        self._add(Condition(dimension=dimension, value=value, skipped=why))

    # --- one condition, looked at up to LOOKS times

    async def _look(self, m: Measured, requests: int, deadline_s: float, cold: bool = False) -> Run:
        """One more run of the condition, pooled with its earlier ones and judged again. It sends
        `requests` at most and stops at `deadline_s` (seconds left), the end of its part's share."""
        name = m.name if not m.runs else f"{m.name}-{len(m.runs) + 1}"
        need_s = requests * self.e2e_s * m.factor
        duration = max(1.0, min(2 * need_s, self.left_s() - max(deadline_s, self._reserve(m))))
        load = Load(concurrency=1, requests=requests, cold=cold, duration_s=duration)
        # The drift repeats the baseline's settings with prompts of its own (a cache must not help it).
        look = len(m.runs) + (DRIFT_SEED_OFFSET if m.dimension == "drift" else 0)
        result = await self._step(name, load, m.prompts, m.workload, look=look)
        sample = sample_of(result.directory)
        m.sample = sample if not m.runs else m.sample.pooled(sample)
        m.first = m.first or result
        m.runs.append(name)
        condition = self._judged(m, result)
        if m.index is None:
            m.index = len(self.claim.conditions)
            self.claim.conditions.append(condition)
        else:
            self.claim.conditions[m.index] = condition
        self._write()
        return result

    def _reserve(self, m: Measured) -> float:
        """What a condition's runs leave for the drift's part (the drift itself, nothing)."""
        return 0.0 if m.dimension == "drift" else self._drift_reserve()

    def _more(self, m: Measured, deadline_s: float) -> int:
        """The requests of the condition's next look: what its checks still need, as many as fit before
        `deadline_s` (seconds left at which its share ends); 0 when decided, out of looks or of time."""
        if m.index is None or len(m.runs) >= LOOKS or decided(m.checks):
            return 0
        needed = still_needed(m.checks)
        want = max(LADDER_REQUESTS, (needed - m.sample.measured) if needed else self.cs.condition_requests)
        fit = int((self.left_s() - deadline_s) / (self.e2e_s * m.factor))
        room = self._requests_left()
        return max(0, min(want, fit, room if room is not None else want))

    async def _until_decided(self, m: Measured, deadline_s: float, cold: bool = False) -> Run | None:
        """The condition's first run, then more while it is undecided and its share lasts (its part
        ends `deadline_s` seconds before the budget does). None when not even a few requests fit
        (it is then skipped with the reason); else the last run."""
        requests = self.cs.condition_requests if not cold else max(WARM_REQUESTS, self.cs.condition_requests)
        few = LADDER_REQUESTS * self.e2e_s * m.factor
        why = self._room(m.dimension, few, LADDER_REQUESTS, self._reserve(m))
        if why and not cold:
            self._skip(m.dimension, why, m.value)
            return None
        room = self._requests_left()
        result = await self._look(m, min(requests, room) if room is not None else requests, deadline_s, cold=cold)
        self.measured.append(m)
        while not result.interrupted and (more := self._more(m, deadline_s)) > 0:
            self.notify(f"{m.dimension} {m.value}: undecided after {m.sample.measured} requests; {more} more...")
            result = await self._look(m, more, deadline_s)
        return result

    async def _top_up(self) -> bool:
        """Time left before the drift's part goes to the undecided conditions, most important first."""
        for m in sorted(self.measured, key=lambda m: PRIORITY.index(m.dimension)):
            while (more := self._more(m, self._drift_reserve())) > 0:
                self.notify(f"{m.dimension} {m.value}: the budget left buys {more} more requests...")
                if (await self._look(m, more, self._drift_reserve())).interrupted:
                    return False
        return True

    # --- the conditions

    async def _warm(self) -> bool:
        self.notify("cold request, then warm requests one at a time...")
        m = Measured("warm", "warm", 1, PromptSpec(input_tokens=(SHORT_PROMPT, 0.0)))
        deadline = self.left_s() - self._slice("warm")
        result = await self._until_decided(m, deadline, cold=True)
        assert result is not None and m.first is not None
        self.claim.model = self.claim.model or result.manifest.model
        # the cold request is in the first run, whatever runs followed it
        self.claim.conditions.insert(m.index or 0, self._cold_condition(m.first))
        m.index = (m.index or 0) + 1
        self._write()
        e2e = result.summary.metrics.e2e_ms.p50
        self.e2e_s = max(e2e / 1000, 0.01) if e2e else self.e2e_s
        server = result.manifest.server
        self.context = self.cs.context_tokens or (server.max_model_len if server else None)
        self._say_what_fits()
        return not result.interrupted

    def _say_what_fits(self) -> None:
        """The plan again, now that a request's latency is known: what each part can decide."""
        n = self.cs.condition_requests
        for step in self.claim.plan:
            if step.dimension in ("warm", "quality"):
                continue
            per = (step.needed or n) * self.e2e_s
            verdict = "can decide a condition" if per <= step.seconds else "cannot decide even one condition"
            self.notify(
                f"  {step.dimension}: {step.needed or n} requests decide a condition if none is over a limit "
                f"(about {per:.0f} s at {self.e2e_s:.1f} s a request); its share, {step.seconds:.0f} s, {verdict}"
            )

    def _cold_condition(self, first: Run) -> Condition:
        """The first request alone. It is one event, not a distribution: each figure is judged as it
        is (held or failed, never unproven), and the verdict asks whether it differs from the
        baseline beyond chance before calling it a restriction."""
        cold = first.summary.cold
        per_request = tuple(o for o in self.cs.objectives if o.kind in ("time", "speed") or o.figure == "error_rate")
        if not cold:
            return Condition(dimension="cold", skipped="no cold request was sent")
        checks = [_as_event(c) for c in judge_all(per_request, sample_of(first.directory, phase="cold"))]
        return Condition(
            dimension="cold",
            value="first request",
            held=all_held(checks),
            outcome=outcome_of([c.saved() for c in checks]),
            figures=ConditionFigures(ttft_ms=cold.ttft_ms, e2e_ms=cold.e2e_ms, error_kind=cold.error_kind),
            checks=[c.saved() for c in checks],
            run_dir=first.directory.name,
        )

    def _slice(self, part: Dimension) -> float:
        return max(self.cs.budget_s * SHARES[part], 1.0)

    def _cap(self, need_s: float) -> float:
        """A run's duration: twice its estimate, never past what is left before the drift's part (the
        request in flight at the cap still finishes)."""
        return max(1.0, min(2 * need_s, self.left_s() - self._drift_reserve()))

    async def _concurrency(self) -> bool:
        steps = SEARCH_STEPS
        per_step = self.cs.search_requests
        need = 3 * per_step * self.e2e_s  # the first three steps at least (concurrency 1, 2, 4)
        why = self._room("concurrency", min(need, 3 * 8 * self.e2e_s), 8 * 3, self._drift_reserve())
        if why:
            self._skip("concurrency", why)
            return True
        budget = min(self._slice("concurrency"), self.left_s() - self._drift_reserve())
        self.notify(f"concurrency: searching for the highest that meets the expectations ({budget:.0f} s)...")
        template = dataclasses.replace(
            self.cs.template,
            load=Load(
                requests=per_step, cold=False, duration_s=max(budget / steps, 1.0), seed=self.cs.template.load.seed
            ),
            # each step is capped; the search gets as many steps as fit its share
            prompts=PromptSpec(input_tokens=(SHORT_PROMPT, 0.0)),
            output=self.directory / "concurrency",
        )
        search = SweepPlan(
            kind="sla",
            objectives=self.cs.expectations,
            search="concurrency",
            max_value=float(self._max_concurrency()),
            max_probes=steps,
            repeats=SEARCH_LOOKS - 1,
            requests_per_worker=4,
            max_error_rate=self.cs.max_error_rate,
            confidence=self.cs.confidence,
            min_requests=per_step,
        )
        result = await run_sweep(template, search, self.progress_for, self.argv)
        sweep = result.sweep
        assert isinstance(sweep, SweepFile)
        self.claim.requests_sent += sum(r.requests.total for r in sweep.steps)
        self._search_conditions(sweep)
        return not result.any_interrupted

    def _max_concurrency(self) -> int:
        planned = self.planned["concurrency"].max_concurrency or self.cs.max_concurrency
        room = self._requests_left()
        if room is None:
            return planned
        # Every step may send max(planned, 4 x c): keep the worst case inside the request limit.
        return max(1, min(planned, room // (4 * SEARCH_STEPS)))

    def _search_conditions(self, sweep: SweepFile) -> None:
        rows = [r for r in sweep.steps if r.checks is not None and r.value is not None]
        for value in sorted({r.value for r in rows if r.value is not None}):
            runs = [r for r in rows if r.value == value]
            last = runs[-1]  # the pooled verdict at that value
            checks = last.checks or []
            outcome = outcome_of(checks)
            self.claim.conditions.append(
                Condition(
                    dimension="concurrency",
                    value=int(value),
                    held=bool(last.passed),
                    outcome=outcome,
                    figures=_row_figures(last),
                    checks=checks,
                    run_dir=f"concurrency/{runs[0].step}",
                    runs=[f"concurrency/{r.step}" for r in runs],
                    note=None
                    if outcome != "unproven"
                    else "undecided: the requests cannot bound a figure clear of its limit",
                )
            )
        best = sweep.sla.highest_passing if sweep.sla else None
        worst = sweep.sla.lowest_failing if sweep.sla else None
        best_at, worst_at = best.concurrency if best else None, worst.concurrency if worst else None
        self.claim.limits.concurrency = int(best_at) if best_at is not None else None
        self.claim.limits.concurrency_certain = best.certain if best else None
        self.claim.limits.concurrency_failing = int(worst_at) if worst_at is not None else None
        self._write()

    async def _prompt_lengths(self) -> bool:
        cap = self.cs.max_prompt_tokens
        if self.context:
            cap = min(cap, self.context - (self.cs.template.request.max_tokens or 256) - 64)
        sizes = prompt_ladder(cap)
        if not sizes:
            self._skip("prompt_tokens", f"the model's context ({self.context} tokens) leaves no room")
            return True
        self.notify(f"prompt length: {', '.join(map(str, sizes))} tokens, one at a time...")
        deadline = self.left_s() - min(self._slice("prompt_tokens"), self.left_s() - self._drift_reserve())
        for i, n in enumerate(sizes):
            m = Measured(f"prompt-{n}", "prompt_tokens", n, PromptSpec(input_tokens=(n, 0.0)), factor=1 + n / 2048)
            need = LADDER_REQUESTS * self.e2e_s * m.factor  # longer prompts take longer to prefill
            if self.left_s() - need < deadline:
                share = max(self.left_s() - deadline, 0)
                self._skip("prompt_tokens", f"its share: it needs about {need:.0f} s, {share:.0f} s were left", n)
                continue
            result = await self._until_decided(m, deadline)
            if result is None:
                continue
            if result.interrupted:
                return False
            condition = self.claim.conditions[m.index or 0]
            condition.figures["prompt_tokens_mean"] = result.summary.metrics.prompt_tokens.mean
            if condition.outcome == "held":
                self.claim.limits.prompt_tokens = n
            elif condition.outcome == "failed":
                self.claim.limits.prompt_tokens_failing = n
                for longer in sizes[i + 1 :]:
                    self._skip("prompt_tokens", f"a shorter prompt ({n} tokens) already failed", longer)
                break
        return True

    async def _cache(self) -> bool:
        """The same prompt length busted and behind a shared prefix: the verdict compares the two with
        each other, so a difference that prompt length explains is never called the cache's."""
        size = CACHE_PROMPT if not self.context else min(CACHE_PROMPT, self.context // 2)
        factor = 1 + size / 2048  # longer prompts take longer to prefill
        need = 2 * LADDER_REQUESTS * self.e2e_s * factor
        why = self._room("cache", need, 2 * LADDER_REQUESTS, self._drift_reserve())
        if why:
            self._skip("cache", why)
            return True
        self.notify(f"cache: {size}-token prompts, busted and behind a shared prefix...")
        deadline = self.left_s() - min(self._slice("cache"), self.left_s() - self._drift_reserve())
        busted = Measured(
            "cache-busted",
            "cache",
            "busted",
            PromptSpec(input_tokens=(size, 0.0)),
            WorkloadSpec(cache_bust=True),
            factor,
        )
        # each gets half of what is left of the share
        result = await self._until_decided(busted, (self.left_s() + deadline) / 2)
        if result is None or result.interrupted:
            return result is None
        shared = Measured(
            "cache-shared",
            "cache",
            "shared_prefix",
            PromptSpec(input_tokens=(SHORT_PROMPT, 0.0)),
            WorkloadSpec(shared_prefix_tokens=size - SHORT_PROMPT),
            factor,
        )
        result = await self._until_decided(shared, deadline)
        return result is None or not result.interrupted

    async def _content(self) -> bool:
        """What the model is asked to write (natural prose, a copy of the prompt, random text), each
        alone at the baseline's load and prompt length: speed that depends on content points at
        speculative decoding, and nothing else differs from the baseline."""
        deadline = self.left_s() - min(self._slice("content"), self.left_s() - self._drift_reserve())
        for kind in CONTENT_KINDS:
            m = Measured(
                f"content-{kind}", "content", str(kind), PromptSpec(content=str(kind), input_tokens=(SHORT_PROMPT, 0.0))
            )
            try:
                result = await self._until_decided(m, deadline)
            except InvalidInput as exc:  # an API that writes no text, say
                self._skip("content", exc.problem, str(kind))
                return True
            if result is not None and result.interrupted:
                return False
        return True

    async def _repeated(self) -> bool:
        """MLPerf's TEST04: one prompt sent again and again at the baseline's load and prompt length (a
        cold request first, so the server has seen it), against the baseline's distinct prompts; looked
        at again, with a fresh prompt, while undecided and its share lasts (at most LOOKS runs)."""
        warm = next((m for m in self.measured if m.dimension == "warm"), None)
        if warm is None:
            return True
        n = self.cs.repeat_requests
        need = (1 + n) * self.e2e_s
        why = self._room("compliance", need, 1 + n, self._drift_reserve())
        share = min(self._slice("compliance"), self.left_s() - self._drift_reserve())
        if not why and need > share:  # a run cut short by its share would decide nothing
            why = f"its share: it needs about {need:.0f} s, {max(share, 0):.0f} s were left"
        if why:
            self._skip("compliance", why, compliance.REPEATED_PROMPT)
            return True
        self.notify(f"compliance: one prompt sent {n} times, against the baseline's distinct prompts...")
        deadline = self.left_s() - min(self._slice("compliance"), self.left_s() - self._drift_reserve())
        sample: Sample | None = None
        runs: list[str] = []
        index: int | None = None
        while len(runs) < LOOKS:
            name = "repeated-prompt" if not runs else f"repeated-prompt-{len(runs) + 1}"
            duration = max(1.0, min(2 * (1 + n) * self.e2e_s, self.left_s() - max(deadline, self._drift_reserve())))
            load = Load(concurrency=1, requests=n, cold=True, duration_s=duration)
            prompts = PromptSpec(input_tokens=(SHORT_PROMPT, 0.0), count=1)  # one prompt, never busted
            result = await self._step(name, load, prompts, WorkloadSpec(cache_bust=False), look=len(runs))
            runs.append(name)
            got = sample_of(result.directory)
            sample = got if sample is None else sample.pooled(got)
            condition = compliance.repeated_prompt(sample, warm.sample, self.cs.look_confidence)
            condition.run_dir, condition.runs = runs[0], list(runs)
            condition.figures["prompt_tokens_mean"] = result.summary.metrics.prompt_tokens.mean
            if index is None:
                index = len(self.claim.conditions)
                self.claim.conditions.append(condition)
            else:
                self.claim.conditions[index] = condition
            self._write()
            if result.interrupted:
                return False
            if condition.outcome != "unproven" or self.left_s() - deadline < (1 + n) * self.e2e_s:
                break
        return True

    def _judge_answers(self) -> None:
        """TEST06 and TEST09 on the answers of every run the battery made (the search's steps too)."""
        dirs = dict.fromkeys(self.directory / run for c in self.claim.conditions for run in c.runs)
        answers = compliance.answers_in(list(dirs))
        if not answers:
            return
        ignore_eos = self.cs.template.request.extra_body.get("ignore_eos") is True
        confidence = self.cs.confidence  # one look: the answers are judged once, at the end
        for condition in (
            compliance.token_count(answers, confidence),
            compliance.finishes(answers, confidence),
            compliance.output_length(answers, ignore_eos, confidence),
        ):
            same = [
                i
                for i, c in enumerate(self.claim.conditions)
                if c.dimension == "compliance" and c.value == condition.value
            ]
            if same:
                self.claim.conditions[same[0]] = condition
            else:
                self.claim.conditions.append(condition)

    async def _drift(self) -> bool:
        left = self.left_s()
        need = LADDER_REQUESTS * self.e2e_s
        why = self._room("drift", need, LADDER_REQUESTS)
        if why:
            self._skip("drift", why)
            return True
        self.notify(f"drift: the baseline again for the budget's last part ({left:.0f} s left)...")
        m = Measured("drift", "drift", "end of the budget", PromptSpec(input_tokens=(SHORT_PROMPT, 0.0)))
        result = await self._until_decided(m, deadline_s=self.e2e_s)
        if result is None:
            return True
        condition = self.claim.conditions[m.index or 0]
        warm = next((c for c in self.claim.conditions if c.dimension == "warm"), None)
        if warm is not None:
            condition.figures["vs_warm"] = _ratios(warm.figures, condition.figures)
        self._write()
        return not result.interrupted

    async def _quality(self) -> None:
        samples = self.cs.quality_samples or 0
        if "quality" not in self.planned:
            self._skip("quality", "left out by the plan")
            return
        self.notify(f"quality: {samples} items of each built-in suite on the same endpoint...")
        self._add(await quality_condition(self.cs.template, samples, self.directory, self.claim))


def figures_of(summary: Summary) -> ConditionFigures:
    """A condition's key figures, from its run's summary."""
    m = summary.metrics
    tpot = m.tpot_ms.p50
    return ConditionFigures(
        requests=summary.requests.total,
        error_rate=summary.error_rate,
        ttft_ms_p50=m.ttft_ms.p50,
        ttft_ms_p99=m.ttft_ms.p99,
        tpot_ms_p50=tpot,
        e2e_ms_p50=m.e2e_ms.p50,
        output_tok_s_per_user_p50=round(1000 / tpot, 3) if tpot else None,
        output_tok_s=summary.throughput.output_tokens_per_s,
        prompt_tokens_mean=m.prompt_tokens.mean,
    )


def _row_figures(row: StepRow) -> ConditionFigures:
    tpot = row.tpot_ms.p50
    return ConditionFigures(
        requests=row.requests.total,
        error_rate=row.error_rate,
        ttft_ms_p50=row.ttft_ms.p50,
        tpot_ms_p50=tpot,
        e2e_ms_p50=row.e2e_ms.p50,
        output_tok_s_per_user_p50=round(1000 / tpot, 3) if tpot else None,
        output_tok_s=row.output_tokens_per_s,
        prompt_tokens_mean=row.prompt_tokens_mean,
    )


def _ratios(before: ConditionFigures, after: ConditionFigures) -> DriftRatios:
    """after / before for the latencies and speeds both have: how far the server drifted."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(b / a, 4) if a and b is not None and math.isfinite(b / a) else None

    return DriftRatios(
        ttft_ms_p50=ratio(before.get("ttft_ms_p50"), after.get("ttft_ms_p50")),
        tpot_ms_p50=ratio(before.get("tpot_ms_p50"), after.get("tpot_ms_p50")),
        e2e_ms_p50=ratio(before.get("e2e_ms_p50"), after.get("e2e_ms_p50")),
        output_tok_s=ratio(before.get("output_tok_s"), after.get("output_tok_s")),
    )
