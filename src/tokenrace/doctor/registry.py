"""The check registry, the context a check works in, and the helpers it returns its finding with.

A check is a small function `(ctx) -> Finding` registered with `@check(id, title, ...)`. Checks run
in registration order and may read earlier results through `ctx`. Every probe call a check makes
through `ctx` is recorded as that check's evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tokenrace.doctor import knowledge
from tokenrace.doctor.commands import COMMANDS, DEFAULT_TIMEOUT, TIMEOUTS, display
from tokenrace.doctor.model_size import ModelSize
from tokenrace.doctor.probe import Probe, ProbeResult
from tokenrace.doctor.result import CheckResult, Evidence, Fact, Status
from tokenrace.model.environment import GpuInfo

EXCERPT_LINES = 14
EXCERPT_CHARS = 1500


@dataclass
class Finding:
    status: Status
    summary: str
    cause: str | None = None
    fix: str | None = None
    kb: str | None = None
    details: dict[str, Fact] = field(default_factory=dict)


def ok(summary: str, **details: Fact) -> Finding:
    return Finding(Status.OK, summary, details=details)


def skip(reason: str, **details: Fact) -> Finding:
    return Finding(Status.SKIP, reason, details=details)


def warn(summary: str, cause: str, fix: str, **details: Fact) -> Finding:
    return Finding(Status.WARN, summary, cause, fix, details=details)


def fail(summary: str, cause: str, fix: str, **details: Fact) -> Finding:
    return Finding(Status.FAIL, summary, cause, fix, details=details)


def from_kb(status: Status, summary: str, kb_id: str, *, extra_fix: str = "", **details: Fact) -> Finding:
    """A finding whose cause and fix come from the knowledge base (the guides' tables)."""
    item = knowledge.entry(kb_id)
    fix = f"{item.fix} {extra_fix}".strip()
    return Finding(status, summary, item.cause, fix, kb=kb_id, details=details)


CheckFunc = Callable[["Context"], Finding]


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    func: CheckFunc
    needs_gpu: bool
    linux_only: bool
    needs_model: bool


REGISTRY: list[CheckSpec] = []


def registered() -> list[CheckSpec]:
    """Every check, in running order (importing the checks package registers them)."""
    import tokenrace.doctor.checks  # noqa: F401, PLC0415 - cycle: each check imports this registry, and importing the checks package registers them

    return list(REGISTRY)


def check(
    check_id: str, title: str, *, needs_gpu: bool = False, linux_only: bool = False, needs_model: bool = False
) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check. `needs_gpu` skips it when the PCI check found no NVIDIA device;
    `linux_only` skips it elsewhere; `needs_model` leaves it out unless --model is given."""

    def register(func: CheckFunc) -> CheckFunc:
        if any(spec.id == check_id for spec in REGISTRY):
            raise ValueError(f"check {check_id!r} registered twice")
        REGISTRY.append(CheckSpec(check_id, title, func, needs_gpu, linux_only, needs_model))
        return func

    return register


class Context:
    """What a check sees: the probe, the model asked about, earlier results, cached commands."""

    def __init__(self, probe: Probe, model: str | None = None) -> None:
        self.probe = probe
        self.model = model
        self.results: dict[str, CheckResult] = {}
        self.in_container: bool | None = None  # found once, by checks.common.in_container
        self.model_size: ModelSize | None = None  # sized once, by checks.model.sized
        self._runs: dict[str, ProbeResult] = {}
        self._evidence: list[Evidence] = []

    # probes, recorded as evidence
    def run(self, name: str, grep: str | None = None) -> ProbeResult:
        if name not in self._runs:
            self._runs[name] = self.probe.run(COMMANDS[name], TIMEOUTS.get(name, DEFAULT_TIMEOUT))
        result = self._runs[name]
        label = display(result.cmd) + (f" | grep -E '{grep}'" if grep else "")
        self._evidence.append(Evidence(cmd=label, excerpt=excerpt(result, grep), returncode=result.returncode))
        return result

    def read(self, path: str, grep: str | None = None) -> str | None:
        text = self.probe.read_file(path)
        shown = "(no such file)" if text is None else _clip(_lines(text, grep))
        self._evidence.append(Evidence(cmd=f"cat {path}" + (f" | grep -E '{grep}'" if grep else ""), excerpt=shown))
        return text

    def note(self, cmd: str, text: str) -> None:
        self._evidence.append(Evidence(cmd=cmd, excerpt=_clip(text)))

    # earlier results
    def detail(self, check_id: str, key: str) -> Fact:
        result = self.results.get(check_id)
        return None if result is None else result.details.get(key)

    def text_detail(self, check_id: str, key: str) -> str | None:
        """A fact an earlier check found as text (a version), else None."""
        value = self.detail(check_id, key)
        return value if isinstance(value, str) else None

    def smi_gpus(self) -> list[GpuInfo]:
        """The GPUs the nvidia-smi check listed (none when it did not run or failed)."""
        value = self.detail("nvidia-smi", "gpus")
        return [g for g in value if isinstance(g, GpuInfo)] if isinstance(value, list) else []

    def status(self, check_id: str) -> Status | None:
        result = self.results.get(check_id)
        return None if result is None else result.status

    def gpu_on_bus(self) -> bool | None:
        """True/False from the PCI check; None when it could not tell."""
        value = self.detail("pci", "nvidia_on_bus")
        return None if value is None else bool(value)

    # used by the runner
    def take_evidence(self) -> list[Evidence]:
        taken, self._evidence = self._evidence, []
        return taken


def excerpt(result: ProbeResult, grep: str | None = None) -> str:
    if result.missing:
        return "(command not found)"
    if result.timed_out:
        return "(no answer before the timeout; the command was stopped)"
    return _clip(_lines(result.output, grep)) or "(no output)"


def _lines(text: str, grep: str | None) -> str:
    lines = text.splitlines()
    if grep:
        lines = [line for line in lines if re.search(grep, line, re.IGNORECASE)]
        if not lines:
            return "(no matching lines)"
    shown = lines[:EXCERPT_LINES]
    more = len(lines) - len(shown)
    return "\n".join(shown) + (f"\n... ({more} more lines)" if more > 0 else "")


def _clip(text: str) -> str:
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + " ..."
