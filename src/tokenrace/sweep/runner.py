"""Sweeps: a series of full runs, one run directory per step, and a sweep.json that ties them together.

Kinds (docs/sweep.md):

- concurrency: closed loop at 1, 2, 4, 8, ...; stops early at saturation or on errors; marks the knee.
- rate: open loop at the given request rates; the same stopping rule and knee.
- input_tokens: synthetic prompts of each size at fixed load; TTFT against prompt tokens, with a
  fitted prefill rate.
- goodput: the highest request rate whose run still meets the SLOs, by bracketing and bisection;
  every probe is a step.
- content (`--content all`): natural, copy and random content, one step each at the same load;
  TPOT per kind compared, with the engine's acceptance per kind where /metrics has it.

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
from tokenrace.load.content import KINDS as CONTENT_KINDS
from tokenrace.load.runner import Load
from tokenrace.model.files import RECORDS, SCHEMA_VERSION, SWEEP
from tokenrace.model.manifest import Manifest
from tokenrace.model.records import RecordLine
from tokenrace.model.run import Knee, StepRow, SweepFile
from tokenrace.model.summary import Summary
from tokenrace.runs.history import index_quietly
from tokenrace.runs.rows import step_row
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession, BenchSettings, Progress, PromptSpec
from tokenrace.runs.store import default_run_dir, write_model
from tokenrace.sweep import knee as kn

KINDS = ("concurrency", "rate", "input_tokens", "goodput", "content")
VALUES_PARAM = {
    "concurrency": "concurrencies",
    "rate": "rates",
    "input_tokens": "input_lengths",
}  # the input each kind ramps
DEFAULT_CONCURRENCIES: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_INPUT_TOKENS: tuple[float, ...] = (128, 256, 512, 1024, 2048)
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

    def validate(self, template: BenchSettings) -> None:
        if self.kind not in KINDS:
            raise UsageError(f"unknown sweep kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        values = VALUES_PARAM.get(self.kind, "values")
        if self.kind not in ("goodput", "content") and not self.values:
            raise InvalidInput(values, "the sweep has no steps")
        if any(v <= 0 or not math.isfinite(v) for v in self.values):
            raise InvalidInput(values, "sweep values must be positive numbers")
        if self.kind in ("concurrency", "input_tokens") and any(v != int(v) for v in self.values):
            raise InvalidInput(values, "concurrency and input-token sweep values must be whole numbers")
        if self.kind == "concurrency" and template.load.rate is not None:
            raise InvalidInput("rate", "is open loop; a concurrency sweep is closed loop (sweep rates instead)")
        if self.kind == "goodput" and not template.slo:
            raise InvalidInput("slo", "a goodput search needs SLOs, e.g. ttft=500ms,tpot=50ms")
        self._check_rules()

    def _check_rules(self) -> None:
        checks = (
            ("gain_threshold", 0 < self.gain_threshold < 10, "must be in (0, 10)"),
            ("patience", self.patience >= 1, "must be at least 1"),
            ("attainment", 0 < self.attainment <= 1, "must be in (0, 1]"),
            ("tolerance", self.tolerance > 0, "must be positive"),
            ("start_rate", self.start_rate > 0, "must be positive"),
            ("max_probes", self.max_probes >= 2, "must be at least 2"),
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
    extra: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = "completed"
    knee: Knee | None = None


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
        if (self.parent / SWEEP).exists():
            raise InvalidInput("output", f"{self.parent} already holds a sweep; choose another directory")
        self.runner = StepRunner(template, self.parent, progress_for, argv)
        self.state = _State()
        self.started = datetime.now(UTC).isoformat()

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
            await self._goodput()
        file = self._write(finished=True)
        index_quietly(self.parent)
        manifest = self.state.steps[0][1].manifest if self.state.steps else Manifest()
        return Run(self.parent, "sweep", file, manifest, self.state.steps)

    # --- step plumbing

    def _load(self, value: float, first: bool) -> Load:
        base = self.template.load
        cold = base.cold and first
        if self.plan.kind == "concurrency":
            c = int(value)
            requests = base.requests
            if self.plan.requests_per_worker and base.duration_s is None:
                requests = max(requests or 0, self.plan.requests_per_worker * c)
            return dataclasses.replace(base, concurrency=c, rate=None, requests=requests, cold=cold)
        if self.plan.kind in ("rate", "goodput"):
            return dataclasses.replace(base, rate=float(value), cold=cold)
        return dataclasses.replace(base, cold=cold)

    async def _step(self, name: str, value: float, prompts: PromptSpec | None = None) -> Run:
        result = await self.runner.run(name, self._load(value, not self.state.steps), prompts)
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
        self._mark_knee()

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
        fit = kn.fit_prefill([r.prompt_tokens_mean for r in rows], [r.ttft_ms.p50 for r in rows])
        self.state.extra["prefill"] = {**fit.to_dict(), "x": "prompt_tokens mean", "y": "ttft_ms p50"}

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
        section = content_section(samples, acceptance)
        self.state.extra["content"] = section

    async def _goodput(self) -> None:
        plan = self.plan

        async def probe(rate: float) -> bool:
            n = len(self.state.steps) + 1
            result = await self._step(f"p{n:02d}-r{_num(rate)}", rate)
            if result.interrupted:
                raise _Interrupted
            ok = self._meets(result.summary)
            self.state.rows[-1].passed = ok
            return ok

        try:
            search = await kn.search_max_rate(probe, plan.start_rate, plan.tolerance, plan.max_probes)
        except _Interrupted:
            self.state.extra["goodput_search"] = {"best_rate": None, "reason": "interrupted"}
            return
        best = next((r for r in self.state.rows if r.passed and r.value == search.best_rate), None)
        self.state.stop_reason = search.reason
        self.state.extra["goodput_search"] = {
            "best_rate": search.best_rate,
            "lower": search.lower,
            "upper": search.upper,
            "reason": search.reason,
            "probes": len(search.probes),
            "attainment": plan.attainment,
            "slo": self.template.slo,
            "best_step": best.step if best else None,
            "goodput_requests_per_s": best.goodput_requests_per_s if best else None,
        }

    def _meets(self, summary: Summary) -> bool:
        rate = summary.error_rate
        frac = summary.goodput.fraction if summary.goodput else None
        return (
            frac is not None and frac >= self.plan.attainment and rate is not None and rate <= self.plan.max_error_rate
        )

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
        summary = {
            "schema_version": SCHEMA_VERSION,
            "kind": "sweep",
            "sweep": self.plan.kind,
            "tool": "tokenrace",
            "version": __version__,
            "command": first.command,
            "endpoint": first.endpoint,
            "provider": first.provider,
            "model": first.model,
            "label": self.template.label,
            "started_at": self.started,
            "finished_at": datetime.now(UTC).isoformat() if finished else None,
            "plan": dataclasses.asdict(self.plan),
            "rule": {"throughput": "steady output tokens/s (else over the window)", "latency": "e2e_ms p95"},
            "stop_reason": self.state.stop_reason if finished else "running",
            "knee": self.state.knee,
            "steps": self.state.rows,
            **self.state.extra,
        }
        file = SweepFile.model_validate(summary)
        write_model(self.parent / SWEEP, file)
        return file


class _Interrupted(Exception):
    pass


def _content_samples(directory: Path) -> list[ContentSample]:
    """A step's succeeded measured requests, read back from its records.jsonl."""
    out = []
    for line in (directory / RECORDS).read_text(encoding="utf-8").splitlines():
        r = RecordLine.model_validate_json(line)
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
