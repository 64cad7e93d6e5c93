"""Before a GPU engine starts: ask the planner whether the model fits, and refuse with the numbers
and a suggestion unless --force is given."""

from __future__ import annotations

from dataclasses import dataclass

from tokenrace import plan as planner
from tokenrace.doctor import collect_environment
from tokenrace.errors import TokenraceError, UsageError
from tokenrace.plan.memory import DEFAULT_UTILIZATION
from tokenrace.serve.engines import LaunchSpec

# vLLM/SGLang --dtype and --quantization values -> the planner's precision names.
_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32", "auto": None}
_QUANT = {
    "awq": "awq-int4",
    "awq_marlin": "awq-int4",
    "gptq": "gptq-int4",
    "gptq_marlin": "gptq-int4",
    "fp8": "fp8",
    "bitsandbytes": "int8",
    "int8": "int8",
}


@dataclass(slots=True)
class FitCheck:
    checked: bool
    fits: bool | None
    message: str


def precision_for(spec: LaunchSpec) -> str | None:
    if spec.quantization:
        return _QUANT.get(spec.quantization.lower(), spec.quantization.lower())
    if spec.dtype:
        return _DTYPES.get(spec.dtype.lower(), spec.dtype.lower())
    return None


def detect_gpu() -> tuple[str | None, int]:
    """(the first GPU's name, how many), from the doctor's cheap environment probe."""
    try:
        env = collect_environment()
    except Exception:  # noqa: BLE001 - detection is best effort; --hardware names the device
        return None, 0
    return (env.gpus[0].name if env.gpus else None), env.gpu_count or 0


def check(spec: LaunchSpec, hardware: str | None) -> FitCheck:
    gpu = hardware or detect_gpu()[0]
    if gpu is None:
        return FitCheck(False, None, "no GPU detected and no --hardware given: fit not checked")
    try:
        verdict = planner.check_fit(
            spec.model,
            gpu,
            devices=spec.tensor_parallel_size,
            precision=precision_for(spec),
            context=spec.max_model_len or 4096,
            concurrency=1,
            utilization=spec.gpu_memory_utilization or DEFAULT_UTILIZATION,
        )
    except UsageError as exc:
        return FitCheck(False, None, f"fit not checked: {exc}")
    except TokenraceError as exc:
        return FitCheck(False, None, f"fit not checked: {exc}")
    return FitCheck(True, verdict.fits, verdict.message)
