"""Sweeps: a series of full runs, one run directory per step, and a sweep.json that ties them together.

Kinds (docs/sweep.md):

- concurrency: closed loop at 1, 2, 4, 8, ...; stops early at saturation or on errors; marks the knee.
- rate: open loop at the given request rates; the same stopping rule and knee.
- input_tokens: synthetic prompts of each size at fixed load; TTFT against prompt tokens, with a
  fitted prefill rate.
- sla: the highest concurrency or request rate at which every objective holds (sweep/sla.py), with
  the steps nearest the boundary repeated until each objective's interval is clear of its limit.
- goodput: the SLA search over rates with one objective, the share of requests within the SLOs;
  every probe is a step.
- content (`--content all`): natural, copy and random content, one step each at the same load;
  TPOT per kind compared, with the engine's acceptance per kind where /metrics has it.

An SLA sweep's directory resumes: run it again with the same objectives and it goes on from the
steps it finished.

sweep.json is rewritten after every step, so an interrupted sweep keeps what it measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tokenrace import __version__
from tokenrace.errors import InvalidInput, UsageError
from tokenrace.figures.content import ContentSample, content_section
from tokenrace.figures.cost import CostSpec
from tokenrace.figures.objectives import (
    Objective,
    Sample,
    all_clear,
    all_held,
    error_guard,
    judge_all,
    look_confidence,
    parse_objective,
    requests_to_decide,
)
from tokenrace.load.content import KINDS as CONTENT_KINDS
from tokenrace.load.runner import Load
from tokenrace.model.files import RECORDS, SCHEMA_VERSION, SUMMARY, SWEEP
from tokenrace.model.manifest import Manifest
from tokenrace.model.records import RequestRecord
from tokenrace.model.run import GoodputSearch, Knee, PrefillFit, StepRow, SweepFile
from tokenrace.model.sections import ContentSpeed
from tokenrace.model.sla import SlaPoint, SlaSection, SlaStep, SweepPlanSection
from tokenrace.model.summary import Summary
from tokenrace.runs.history import index_quietly
from tokenrace.runs.reader import load_dir
from tokenrace.runs.rows import step_row
from tokenrace.runs.run import Run
from tokenrace.runs.samples import sample_of
from tokenrace.runs.session import BenchSession, BenchSettings, Progress, PromptSpec
from tokenrace.runs.store import default_run_dir, read_json, write_model
from tokenrace.stats import CONFIDENCE
from tokenrace.sweep import knee as kn
from tokenrace.sweep import sla

KINDS = ("concurrency", "rate", "input_tokens", "sla", "goodput", "content")
VALUES_PARAM = {
    "concurrency": "concurrencies",
    "rate": "rates",
    "input_tokens": "input_lengths",
}  # the input each kind ramps
DEFAULT_CONCURRENCIES: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_INPUT_TOKENS: tuple[float, ...] = (128, 256, 512, 1024, 2048)
SLA_MAX = {"concurrency": 256.0, "rate": 1024.0}  # the search's ceiling when none is given
ProgressFor = Callable[[str, Load], Any]


@dataclass(slots=True)
class SweepPlan:
    kind: str = "concurrency"
    values: tuple[float, ...] = DEFAULT_CONCURRENCIES
    gain_threshold: float = kn.DEFAULT_GAIN_THRESHOLD
    patience: int = 1  # consecutive saturated steps that stop the sweep
    max_error_rate: float = kn.DEFAULT_MAX_ERROR_RATE
    stop_early: bool = True
    requests_per_worker: int | None = None  # concurrency steps run max(requests, this x concurrency)
    attainment: float = 0.95  # goodput: share of requests that must meet every SLO
    start_rate: float = 1.0
    tolerance: float = 0.10
    max_probes: int = 12
    objectives: tuple[Objective, ...] = ()  # sla: what must hold (figures/objectives.py)
    search: sla.SearchKind = "concurrency"  # sla: what the search varies
    repeats: int = 2  # sla, goodput: extra runs at each boundary value until its verdict is clear
    max_value: float | None = None  # sla: the highest concurrency or rate tried (default SLA_MAX)
    confidence: float = CONFIDENCE  # sla: each verdict's, split between a value's runs (its looks)
    # sla: every step sends at least this many; None: planned from the objectives (the strictest
    # percentile at the confidence of one of a value's 1 + repeats looks), 0: no minimum
    min_requests: int | None = None
    offline: bool = False  # concurrency: a last step with every request of the step in flight at once

    def validate(self, template: BenchSettings) -> None:
        if not 0.5 < self.confidence < 1:
            raise InvalidInput("confidence", f"must lie between 0.5 and 1 (e.g. 0.95), got {self.confidence:g}")
        if self.kind not in KINDS:
            raise UsageError(f"unknown sweep kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        values = VALUES_PARAM.get(self.kind, "values")
        if self.kind not in ("goodput", "sla", "content") and not self.values:
            raise InvalidInput(values, "the sweep has no steps")
        if any(v <= 0 or not math.isfinite(v) for v in self.values):
            raise InvalidInput(values, "sweep values must be positive numbers")
        if self.kind in ("concurrency", "input_tokens") and any(v != int(v) for v in self.values):
            raise InvalidInput(values, "concurrency and input-token sweep values must be whole numbers")
        if self.kind == "concurrency" and template.load.rate is not None:
            raise InvalidInput("rate", "is open loop; a concurrency sweep is closed loop (sweep rates instead)")
        if self.offline and self.kind != "concurrency":
            raise InvalidInput("offline", "adds a step to a concurrency sweep; this sweep is of another kind")
        if self.kind == "goodput" and not template.slo:
            raise InvalidInput("slo", "a goodput search needs SLOs, e.g. ttft=500ms,tpot=50ms")
        if self.kind == "sla":
            self._check_sla(template)
        self._check_rules()

    def _check_sla(self, template: BenchSettings) -> None:
        if not self.objectives:
            raise InvalidInput("sla", "give the objectives, e.g. ttft_p99<=500ms,tpot_p50<=50ms")
        if self.search not in ("concurrency", "rate"):
            raise InvalidInput("search", f"must be concurrency or rate, got {self.search!r}")
        if any(o.figure == "goodput" for o in self.objectives) and not template.slo:
            raise InvalidInput("slo", "a goodput objective needs per-request SLOs, e.g. ttft=500ms")
        if self.search == "concurrency" and template.load.rate is not None:
            raise InvalidInput("rate", "is open loop; a concurrency search is closed loop (search rates instead)")
        if self.max_value is not None and not self.max_value > 0:
            raise InvalidInput("max_value", f"must be positive, got {self.max_value}")

    def _check_rules(self) -> None:
        checks = (
            ("gain_threshold", 0 < self.gain_threshold < 10, "must be in (0, 10)"),
            ("patience", self.patience >= 1, "must be at least 1"),
            ("attainment", 0 < self.attainment <= 1, "must be in (0, 1]"),
            ("tolerance", self.tolerance > 0, "must be positive"),
            ("start_rate", self.start_rate > 0, "must be positive"),
            ("max_probes", self.max_probes >= 2, "must be at least 2"),
            ("repeats", self.repeats >= 0, "must be 0 or more"),
        )
        for param, ok, problem in checks:
            if not ok:
                raise InvalidInput(param, f"{problem}, got {getattr(self, param)}")


# --- one step ------------------------------------------------------------------------------------


class StepRunner:
    """Runs one step as a full run directory under `parent`, and indexes it in the history."""

    def __init__(
        self,
        template: BenchSettings,
        parent: Path,
        progress_for: ProgressFor | None = None,
        argv: list[str] | None = None,
    ) -> None:
        self.template = template
        self.parent = parent
        self.progress_for = progress_for
        self.argv = argv

    async def run(self, name: str, load: Load, prompts: PromptSpec | None = None) -> Run:
        settings = dataclasses.replace(
            self.template, load=load, prompts=prompts or self.template.prompts, output=self.parent / name
        )
        progress = self.progress_for(name, load) if self.progress_for else None
        with _entered(progress):
            result = await BenchSession(settings, progress, self.argv).run()
        index_quietly(result.directory)
        return result


def _entered(progress: Progress | None) -> AbstractContextManager[Any]:
    return progress if isinstance(progress, AbstractContextManager) else nullcontext()


# --- the sweep -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _State:
    steps: list[tuple[str, Run]] = field(default_factory=list)
    rows: list[StepRow] = field(default_factory=list)
    stop_reason: str = "completed"
    knee: Knee | None = None
    prefill: PrefillFit | None = None  # prompt-length sweeps
    content: ContentSpeed | None = None  # content sweeps
    sla: SlaSection | None = None  # SLA and goodput searches
    goodput_search: GoodputSearch | None = None  # goodput searches


class Sweep:
    def __init__(
        self,
        template: BenchSettings,
        plan: SweepPlan,
        progress_for: ProgressFor | None = None,
        argv: list[str] | None = None,
        cost: CostSpec | None = None,
    ) -> None:
        plan.validate(template)
        self.cost = cost
        template.load.validate()
        self.template = template
        self.plan = plan
        self.argv = argv
        self.parent = template.output or default_run_dir(template.label or f"sweep-{plan.kind}")
        self.objectives = search_objectives(plan, template)
        if plan.kind == "sla" and plan.min_requests is None:
            looks = look_confidence(plan.confidence, 1 + plan.repeats)
            plan.min_requests = requests_to_decide(self.objectives, looks)
        self.samples: dict[float, Sample] = {}
        self.saved: list[tuple[float, StepRow]] = []  # a resumed search's finished steps, in order
        self.started = datetime.now(UTC).isoformat()
        if (self.parent / SWEEP).exists():
            self.saved = self._resumable()
        self.runner = StepRunner(template, self.parent, progress_for, argv)
        self.state = _State()

    async def run(self) -> Run:
        self.parent.mkdir(parents=True, exist_ok=True)
        kind = self.plan.kind
        if kind in ("concurrency", "rate"):
            await self._ladder()
        elif kind == "input_tokens":
            await self._prompt_lengths()
        elif kind == "content":
            await self._contents()
        else:
            await self._sla()
        file = self._write(finished=True)
        index_quietly(self.parent)
        manifest = self.state.steps[0][1].manifest if self.state.steps else Manifest()
        return Run(self.parent, "sweep", file, manifest, self.state.steps)

    # --- step plumbing

    def _load(self, value: float, first: bool) -> Load:
        base = self.template.load
        cold = base.cold and first
        closed = self.plan.kind == "concurrency" or (self.plan.kind == "sla" and self.plan.search == "concurrency")
        if closed:
            load = _closed(base, int(value), self.plan.requests_per_worker, cold)
            if self.plan.kind == "sla" and self.plan.min_requests and load.requests is not None:
                load = dataclasses.replace(load, requests=max(load.requests, self.plan.min_requests))
            return load
        if self.plan.kind in ("rate", "goodput", "sla"):
            return dataclasses.replace(base, rate=float(value), cold=cold)
        return dataclasses.replace(base, cold=cold)

    async def _step(self, name: str, value: float, prompts: PromptSpec | None = None, load: Load | None = None) -> Run:
        result = await self.runner.run(name, load or self._load(value, not self.state.steps), prompts)
        self.state.steps.append((name, result))
        row = step_row(name, result.directory, result.summary, result.manifest, self.cost)
        self.state.rows.append(row.model_copy(update={"value": value}))
        if result.interrupted:
            self.state.stop_reason = "interrupted"
        self._write(finished=False)
        return result

    # --- kinds

    async def _ladder(self) -> None:
        prefix = "c" if self.plan.kind == "concurrency" else "r"
        for value in self.plan.values:
            result = await self._step(f"{prefix}{_num(value)}", value)
            if result.interrupted:
                break
            a = self._analyse()
            if a.stop_index is not None and self.plan.stop_early:
                self.state.stop_reason = a.stop_reason
                break
        else:
            if self.plan.offline:
                await self._offline()
        self._mark_knee()

    async def _offline(self) -> None:
        """MLPerf's offline point: every request of the step sent at once (concurrency = requests)."""
        load = _closed(self.template.load, int(max(self.plan.values)), self.plan.requests_per_worker, False)
        count = load.requests or int(max(self.plan.values))
        await self._step(
            "offline", float(count), load=dataclasses.replace(load, concurrency=count, requests=count, duration_s=None)
        )

    async def _prompt_lengths(self) -> None:
        for value in self.plan.values:
            spec = dataclasses.replace(self.template.prompts, input_tokens=(int(value), 0.0), text=None, file=None)
            result = await self._step(f"in{int(value)}", value, spec)
            if result.interrupted:
                break
            if kn.is_failing(_point(self.state.rows[-1]), self.plan.max_error_rate):
                self.state.stop_reason = "errors"
                break
        rows = self.state.rows
        tokens, ttft = [r.prompt_tokens_mean for r in rows], [r.ttft_ms.p50 for r in rows]
        self.state.prefill = kn.fit_prefill(tokens, ttft, x="prompt_tokens mean", y="ttft_ms p50")

    async def _contents(self) -> None:
        """Each kind of content alone at the same load (so the engine's counters belong to it), then compared."""
        for kind in CONTENT_KINDS:
            spec = dataclasses.replace(self.template.prompts, content=str(kind))
            result = await self._step(str(kind), float(self.template.load.concurrency), spec)
            if result.interrupted:
                break
        samples: list[ContentSample] = []
        acceptance: dict[str, float | None] = {}
        for name, result in self.state.steps:
            samples += _content_samples(result.directory)
            drafting = result.summary.speculative
            acceptance[name] = drafting.acceptance_rate if drafting is not None else None
        self.state.content = content_section(samples, acceptance)

    async def _sla(self) -> None:
        """The SLA search (sweep/sla.py); every run is a step, repeats included."""
        plan = self.plan
        search_kind = self._search_kind()
        rule = sla.SearchRule(
            kind=search_kind,
            start=plan.start_rate if search_kind == "rate" else 1.0,
            max_value=plan.max_value or SLA_MAX[search_kind],
            tolerance=plan.tolerance,
            max_steps=plan.max_probes,
            repeats=plan.repeats,
        )
        try:
            boundary = await sla.search(self._measure, rule)
        except _Interrupted:
            boundary = None
        self.state.sla = self._sla_section(boundary)
        self.state.stop_reason = boundary.reason if boundary is not None else "interrupted"
        if plan.kind == "goodput":
            self.state.goodput_search = self._goodput_view(boundary)

    def _search_kind(self) -> sla.SearchKind:
        return "rate" if self.plan.kind == "goodput" else self.plan.search

    async def _measure(self, value: float) -> sla.Verdict:
        """One run at `value` (or a resumed sweep's finished one), judged with its value's earlier runs."""
        saved = next((i for i, (v, _) in enumerate(self.saved) if v == value), None)
        if saved is not None:
            _, row = self.saved.pop(saved)
            directory = self.parent / row.step
            self.state.steps.append((row.step, load_dir(directory)))
            self.state.rows.append(row)
        else:
            prefix = "c" if self._search_kind() == "concurrency" else "r"
            result = await self._step(self._step_name(prefix, value), value)
            if result.interrupted:
                raise _Interrupted
            directory = result.directory
        sample = sample_of(directory)
        self.samples[value] = self.samples[value].pooled(sample) if value in self.samples else sample
        # A value is judged after each of its runs: 1 + repeats looks share the confidence.
        checks = judge_all(
            self.objectives, self.samples[value], look_confidence(self.plan.confidence, 1 + self.plan.repeats)
        )
        verdict = sla.Verdict(all_held(checks), all_clear(checks))
        row = self.state.rows[-1]
        row.passed, row.certain, row.checks = verdict.passed, verdict.certain, [c.saved() for c in checks]
        self.state.sla = self._sla_section(None)
        self._write(finished=False)
        return verdict

    def _step_name(self, prefix: str, value: float) -> str:
        n = len(self.state.steps) + 1
        lead = "p" if self.plan.kind == "goodput" else "s"
        while (self.parent / f"{lead}{n:02d}-{prefix}{_num(value)}").exists():
            n += 1  # an interrupted step's directory from before a resume
        return f"{lead}{n:02d}-{prefix}{_num(value)}"

    def _sla_section(self, boundary: sla.Boundary | None) -> SlaSection:
        rows = self.state.rows
        kind = self._search_kind()

        def point(value: float | None) -> SlaPoint | None:
            if value is None:
                return None
            last = [r for r in rows if r.value == value][-1]
            return SlaPoint.model_validate(
                {kind: value, "certain": bool(last.certain), "runs": sum(r.value == value for r in rows)}
            )

        return SlaSection(
            objectives=[o.saved() for o in self.objectives],
            search=kind,
            highest_passing=point(boundary.highest_passing) if boundary else None,
            lowest_failing=point(boundary.lowest_failing) if boundary else None,
            reason=boundary.reason if boundary else ("running" if not rows else "interrupted"),
            steps=[SlaStep(step=r.step, value=r.value, passed=r.passed, certain=r.certain) for r in rows],
        )

    def _goodput_view(self, boundary: sla.Boundary | None) -> GoodputSearch:
        """`--max-goodput`'s summary, read off the same search."""
        best = boundary.highest_passing if boundary else None
        row = next((r for r in reversed(self.state.rows) if r.value == best), None)
        return GoodputSearch(
            best_rate=best,
            lower=best,
            upper=boundary.lowest_failing if boundary else None,
            reason=boundary.reason if boundary else "interrupted",
            probes=len(self.state.rows),
            attainment=self.plan.attainment,
            slo=self.template.slo,
            best_step=row.step if row else None,
            goodput_requests_per_s=row.goodput_requests_per_s if row else None,
        )

    def _resumable(self) -> list[tuple[float, StepRow]]:
        """The finished steps of the SLA search saved in this directory, when it is the same search."""
        saved = SweepFile.model_validate(read_json(self.parent / SWEEP))
        same = (
            self.plan.kind in ("sla", "goodput")
            and saved.sweep == self.plan.kind
            and saved.sla is not None
            and [o.text for o in saved.sla.objectives] == [o.text for o in self.objectives]
            and saved.sla.search == self._search_kind()
        )
        if not same:
            raise InvalidInput("output", f"{self.parent} already holds another sweep; choose another directory")
        steps = []
        for row in saved.steps:
            summary = self.parent / row.step / SUMMARY
            if summary.exists() and not Summary.model_validate(read_json(summary)).interrupted:
                steps.append((float(row.value or 0), row))
        self.started = saved.started_at or self.started
        return steps

    # --- analysis and output

    def _analyse(self) -> kn.Analysis:
        pts = [_point(r) for r in self.state.rows]
        return kn.analyse(pts, self.plan.gain_threshold, self.plan.max_error_rate, self.plan.patience)

    def _mark_knee(self) -> None:
        a = self._analyse()
        for row, g, sat, bad in zip(self.state.rows, a.gains, a.saturated, a.failing, strict=False):
            row.gain, row.saturated, row.failing, row.knee = None if g is None else round(g, 4), sat, bad, False
        if a.knee_index is None:
            return
        row = self.state.rows[a.knee_index]
        row.knee = True
        self.state.knee = Knee(
            index=a.knee_index,
            step=row.step,
            value=row.value,
            reason=a.knee_reason,
            concurrency=row.concurrency,
            rate=row.rate,
            throughput_tokens_per_s=row.throughput_tokens_per_s,
            e2e_p95_ms=row.e2e_ms.p95,
            usd_per_million_output_tokens=row.cost.usd_per_million_output_tokens if row.cost else None,
        )

    def _write(self, finished: bool) -> SweepFile:
        first = self.state.steps[0][1].manifest if self.state.steps else Manifest()
        state = self.state
        file = SweepFile(
            schema_version=SCHEMA_VERSION,
            sweep=self.plan.kind,
            version=__version__,
            command=first.command,
            endpoint=first.endpoint,
            provider=first.provider,
            model=first.model,
            label=self.template.label,
            started_at=self.started,
            finished_at=datetime.now(UTC).isoformat() if finished else None,
            plan=SweepPlanSection.model_validate(dataclasses.asdict(self.plan)),
            rule={"throughput": "steady output tokens/s (else over the window)", "latency": "e2e_ms p95"},
            stop_reason=state.stop_reason if finished else "running",
            knee=state.knee,
            steps=state.rows,
            prefill=state.prefill,
            goodput_search=state.goodput_search,
            sla=state.sla,
            content=state.content,
        )
        write_model(self.parent / SWEEP, file)
        return file


class _Interrupted(Exception):
    pass


def search_objectives(plan: SweepPlan, template: BenchSettings) -> tuple[Objective, ...]:
    """What an SLA or goodput search judges: the objectives, and the error rate unless they name it."""
    if plan.kind == "goodput":
        given: tuple[Objective, ...] = (parse_objective(f"goodput>={plan.attainment}", "attainment"),)
    elif plan.kind == "sla":
        given = plan.objectives
    else:
        return ()
    if any(o.figure == "error_rate" for o in given):
        return given
    return (*given, error_guard(plan.max_error_rate))


def _closed(base: Load, concurrency: int, per_worker: int | None, cold: bool) -> Load:
    requests = base.requests
    # A count (even beside a duration cap) grows with the workers, so each sends `per_worker` at least.
    if per_worker and (base.duration_s is None or requests is not None):
        requests = max(requests or 0, per_worker * concurrency)
    return dataclasses.replace(base, concurrency=concurrency, rate=None, requests=requests, cold=cold)


def _content_samples(directory: Path) -> list[ContentSample]:
    """A step's succeeded measured requests, read back from its records.jsonl."""
    out = []
    for line in (directory / RECORDS).read_text(encoding="utf-8").splitlines():
        r = RequestRecord.model_validate_json(line)
        if r.phase == "measure" and r.error_kind is None and r.content is not None:
            out.append(ContentSample(r.content, r.tpot_ms, r.output_tokens, r.prompt_tokens))
    return out


def _point(row: StepRow) -> kn.Point:
    load = row.rate if row.rate is not None else row.concurrency
    return kn.Point(float(load or 0), row.throughput_tokens_per_s, row.e2e_ms.p95, row.error_rate)


def _num(v: float) -> str:
    """1 -> '1', 2.5 -> '2.5', 0.3333 -> '0.333'."""
    return f"{v:.3f}".rstrip("0").rstrip(".")


async def run_sweep(
    template: BenchSettings,
    plan: SweepPlan,
    progress_for: ProgressFor | None = None,
    argv: list[str] | None = None,
    cost: CostSpec | None = None,
) -> Run:
    return await Sweep(template, plan, progress_for, argv, cost).run()
