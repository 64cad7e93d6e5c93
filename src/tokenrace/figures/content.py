"""Whether decode speed depends on what is generated: `content` in the summary.

Records carry the kind of content they asked for (`--content`: natural, copy, random). Per kind:
TPOT p50 and mean, output and prompt tokens. With two kinds or more, the ratio of the slowest
kind's TPOT p50 to the fastest's, with a 95 % bootstrap interval (tokenrace.stats.ratio_ci). An
interval wholly above ×1.05 means the speed depends on the content; one that reaches below it
(1 included) finds no dependence: equal requests' speeds differ by a few per cent anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from tokenrace.model.records import RequestRecord
from tokenrace.model.sections import ContentKind, ContentSpeed
from tokenrace.model.summary import RunWarning
from tokenrace.stats import describe, ratio_ci

MIN_EFFECT = 1.05  # the interval must lie above this ratio for a dependence
UNEVEN_OUTPUT = 0.2  # output lengths of two kinds this far apart make their TPOTs less comparable


@dataclass(frozen=True, slots=True)
class ContentSample:
    """One succeeded measured request: its kind of content, TPOT and token counts."""

    content: str
    tpot_ms: float | None
    output_tokens: int | None
    prompt_tokens: int | None


def samples_of(records: Sequence[RequestRecord]) -> list[ContentSample]:
    """The samples of succeeded measured records that asked for a kind of content."""
    return [
        ContentSample(r.content, r.tpot_ms, r.output_tokens, r.prompt_tokens)
        for r in records
        if r.content is not None and r.phase == "measure" and r.ok
    ]


def content_section(
    samples: Sequence[ContentSample], acceptance: dict[str, float | None] | None = None
) -> ContentSpeed | None:
    """Per kind of content and compared; `acceptance` per kind, where the engine's counters gave it."""
    tpots: dict[str, list[float]] = {}
    outputs: dict[str, list[int]] = {}
    prompts: dict[str, list[int]] = {}
    for x in samples:
        tpots.setdefault(x.content, [])
        if x.tpot_ms is not None:
            tpots[x.content].append(x.tpot_ms)
        if x.output_tokens is not None:
            outputs.setdefault(x.content, []).append(x.output_tokens)
        if x.prompt_tokens is not None:
            prompts.setdefault(x.content, []).append(x.prompt_tokens)
    if not tpots:
        return None
    kinds = {
        kind: ContentKind(
            requests=len(values),
            tpot_ms_p50=describe(values).p50 if values else None,
            tpot_ms_mean=round(fmean(values), 4) if values else None,
            output_tokens_mean=round(fmean(outputs[kind]), 2) if outputs.get(kind) else None,
            prompt_tokens_mean=round(fmean(prompts[kind]), 2) if prompts.get(kind) else None,
            acceptance_rate=(acceptance or {}).get(kind),
        )
        for kind, values in sorted(tpots.items())
    }
    return _comparison(tpots, kinds)


def _comparison(tpots: dict[str, list[float]], kinds: dict[str, ContentKind]) -> ContentSpeed:
    measured = {k: v.tpot_ms_p50 for k, v in kinds.items() if v.tpot_ms_p50 is not None}
    if len(measured) < 2:
        return ContentSpeed(
            kinds=kinds, verdict="one kind of content: nothing to compare (--content all runs the three)"
        )
    fastest = min(measured, key=lambda k: measured[k])
    slowest = max(measured, key=lambda k: measured[k])
    ci = ratio_ci(tpots[fastest], tpots[slowest], "p50")
    # A difference under MIN_EFFECT is not called a dependence: equal requests' speeds drift that much.
    depends = None if ci.low is None else ci.low > MIN_EFFECT
    return ContentSpeed(
        kinds=kinds,
        slowest=slowest,
        fastest=fastest,
        ratio=None if ci.ratio is None else round(ci.ratio, 4),
        ci_low=None if ci.low is None else round(ci.low, 4),
        ci_high=None if ci.high is None else round(ci.high, 4),
        depends=depends,
        verdict=verdict(fastest, slowest, ci.ratio, ci.low, ci.high, depends),
    )


def verdict(
    fastest: str, slowest: str, ratio: float | None, low: float | None, high: float | None, depends: bool | None
) -> str:
    if ratio is None or depends is None or low is None or high is None:
        return f"too few requests per kind for an interval ({slowest} ÷ {fastest} TPOT p50 not bounded)"
    if depends:
        return (
            f"decode speed depends on content (×{ratio:.1f} between {fastest} and {slowest}): speculative or "
            "lookup decoding likely; a speed claim holds only for content like the content it was measured on"
        )
    return (
        f"no dependence found (TPOT p50 ×{ratio:.2f} between {fastest} and {slowest}, "
        f"95 % interval {low:.2f}-{high:.2f} reaches below ×{MIN_EFFECT:.2f})"
    )


def content_warning(section: ContentSpeed | None) -> RunWarning | None:
    """When the kinds' output lengths differ, TPOT compares answers of different lengths."""
    if section is None:
        return None
    means = {k: v.output_tokens_mean for k, v in section.kinds.items() if v.output_tokens_mean}
    if len(means) < 2 or max(means.values()) <= (1 + UNEVEN_OUTPUT) * min(means.values()):
        return None
    shown = ", ".join(f"{k} {v:.0f}" for k, v in sorted(means.items()))
    return RunWarning(
        code="content.uneven_output",
        message=(
            f"content: output lengths differ between kinds (mean tokens: {shown}); --ignore-eos, or min_tokens "
            "through --extra-body, makes the server write the same length for each"
        ),
        figures={f"{k}_output_tokens_mean": v for k, v in sorted(means.items())},
    )
