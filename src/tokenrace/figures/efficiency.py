"""Measured speed as a percentage of the physical limit (the planner's speed of light).

Known when a run knows its hardware and model: `--hardware`/`--model-config`/`--precision`, or the
embedded model, whose GGUF file and CPU are known (the CPU's memory bandwidth is measured once per
run). Plan at the run's concurrency, with context = mean prompt + mean output / 2 (the mean KV length
while decoding) and the mean prompt as the TTFT's input; a smaller context only raises the bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokenrace import plan as planner
from tokenrace.errors import InvalidInput, TokenraceError
from tokenrace.model.summary import Efficiency, Summary


@dataclass(slots=True)
class EfficiencySpec:
    hardware: str
    model: str  # catalog name, config.json, model folder or .gguf
    precision: str | None = None
    devices: int | None = None


def check_spec(spec: EfficiencySpec) -> None:
    """Raise InvalidInput when the planner cannot read the spec's hardware or model, so a typo is
    reported before a run, not as an `error` in its summary."""
    checks: list[tuple[str, Callable[[], object]]] = [("model_config", lambda: planner.load_model(spec.model))]
    if spec.hardware.strip().lower() != "cpu":  # this machine, measured when the bound is needed
        checks.insert(0, ("hardware", lambda: planner.load_hardware(spec.hardware)))
    precision = spec.precision
    if precision is not None:
        checks.append(("precision", lambda: planner.get_precision(precision)))
    for param, read in checks:
        try:
            read()
        except InvalidInput as exc:
            raise InvalidInput(param, exc.problem) from None
        except TokenraceError as exc:
            raise InvalidInput(param, str(exc)) from None


def efficiency_of(
    summary: Summary, spec: EfficiencySpec, concurrency: int, tokens_per_joule: float | None = None
) -> Efficiency | None:
    """The summary's `efficiency`; when the planner cannot say, one whose `error` says why.
    `tokens_per_joule`: the run's measured output tokens per joule (`energy`), set against the plan's at TDP."""
    m = summary.metrics
    prompt = m.prompt_tokens.mean
    output = m.output_tokens.mean
    tpot = m.tpot_ms.p50
    ttft = m.ttft_ms.p50
    if prompt is None or output is None:
        return Efficiency(error="token counts unknown: no bound to compare with")
    try:
        hw = planner.load_hardware(spec.hardware)
        model = planner.load_model(spec.model)
        result = planner.plan(
            model,
            hw,
            devices=spec.devices,
            precision=spec.precision,
            context=max(1, int(prompt + output / 2)),
            concurrency=max(1, concurrency),
            input_tokens=max(1, int(prompt)),
        )
        eff = planner.efficiency(
            1000.0 / tpot if tpot else None,
            ttft,
            result,
            measured_aggregate_tok_s=summary.throughput.output_tokens_per_s,
            measured_tokens_per_joule=tokens_per_joule,
        )
        nearest = planner.nearest_published(model, hw, result.devices)
    except TokenraceError as exc:
        return Efficiency(error=str(exc))
    return eff.model_copy(
        update={
            "hardware_bandwidth_bytes_per_s": hw.bandwidth_bytes_per_s,
            "hardware_source": hw.source,
            # What others measured on the nearest configuration, against its own bound: the run's
            # share of its bound next to a published one tells whether it is far from what is reachable.
            "nearest_published": nearest.line() if nearest else None,
            "nearest_published_pct_of_bound": nearest.share_pct if nearest else None,
        }
    )
