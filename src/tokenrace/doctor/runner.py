"""Run the registered checks in order and add them up into a report."""

from __future__ import annotations

from pathlib import Path

from tokenrace.doctor.environment import collect_environment
from tokenrace.doctor.model_size import looks_like_path
from tokenrace.doctor.probe import Probe, SystemProbe
from tokenrace.doctor.registry import CheckSpec, Context, Finding, registered, skip, warn
from tokenrace.doctor.result import CheckResult, DoctorReport, Status
from tokenrace.errors import InvalidInput, TokenraceError
from tokenrace.model.environment import Environment

NO_GPU_HEADLINE = (
    "No NVIDIA GPU found on this machine, so GPU engines (vLLM, SGLang, CUDA builds of llama.cpp) cannot run here. "
    "To benchmark them, run tokenrace on a machine with an NVIDIA GPU "
    "(or fix the GPU passthrough of this VM or container). "
    "On this machine, `tokenrace bench` can still measure a hosted OpenAI-compatible API or the embedded CPU model."
)


def run_doctor(probe: Probe | None = None, model: str | None = None, with_environment: bool = True) -> DoctorReport:
    if model and looks_like_path(model) and not Path(model).expanduser().exists():
        raise InvalidInput("model", f"no such file or folder: {model}")
    ctx = Context(probe or SystemProbe(), model)
    for spec in registered():
        if spec.needs_model and not model:
            continue
        finding = _run_one(spec, ctx)
        ctx.results[spec.id] = CheckResult(
            id=spec.id,
            title=spec.title,
            status=finding.status,
            summary=finding.summary,
            evidence=ctx.take_evidence(),
            cause=finding.cause,
            fix=finding.fix,
            kb=finding.kb,
            details=finding.details,
        )
    checks = list(ctx.results.values())
    environment = _environment(ctx.probe) if with_environment else Environment()
    return DoctorReport(checks=checks, headline=headline(checks), environment=environment)


def _run_one(spec: CheckSpec, ctx: Context) -> Finding:
    if spec.linux_only and ctx.probe.system != "Linux":
        return skip(f"only checked on Linux (this is {ctx.probe.system})")
    if spec.needs_gpu and ctx.gpu_on_bus() is False:
        return skip("skipped: no NVIDIA GPU on the PCI bus")
    try:
        return spec.func(ctx)
    except TokenraceError:
        raise
    except Exception as err:  # noqa: BLE001 - one broken check must not take the others down
        return warn(
            f"the check itself crashed: {type(err).__name__}: {err}",
            "A bug in tokenrace doctor.",
            "Please report it with --json output.",
        )


def headline(checks: list[CheckResult]) -> str:
    by_id = {c.id: c for c in checks}
    pci = by_id.get("pci")
    if pci is not None and pci.details.get("nvidia_on_bus") is False:
        return NO_GPU_HEADLINE
    failed = [c for c in checks if c.status is Status.FAIL]
    warned = [c for c in checks if c.status is Status.WARN]
    if failed:
        return f"{len(failed)} problem(s) found. First: {failed[0].summary}. Causes and fixes are below."
    if warned:
        return f"Usable, with {len(warned)} warning(s): {warned[0].summary}."
    smi = by_id.get("nvidia-smi")
    if smi is not None and smi.status is Status.OK:
        return f"The NVIDIA stack looks healthy: {smi.summary}."
    return "All checks passed."


def _environment(probe: Probe) -> Environment:
    try:
        return collect_environment(probe)
    except Exception as err:  # noqa: BLE001 - the report matters more than its appendix
        return Environment(error=f"{type(err).__name__}: {err}")
