"""The claim's quality pass: the built-in suites on the same endpoint, reported beside the speed.

It never enters the verdict: a speed claim and an accuracy figure answer different questions, and a
sceptic wants both side by side rather than one blended number.
"""

from __future__ import annotations

from pathlib import Path

from tokenrace.claim.models import ClaimFile, ClaimQuality, Condition, ConditionFigures
from tokenrace.quality.runner import QualitySettings, run_quality
from tokenrace.quality.suites import resolve_suites
from tokenrace.runs.settings import BenchSettings

QUALITY_DIR = "quality"


async def quality_condition(template: BenchSettings, samples: int, directory: Path, claim: ClaimFile) -> Condition:
    endpoint = template.endpoint
    assert endpoint is not None
    seed = template.load.seed or 0
    settings = QualitySettings(
        base_url=endpoint.base_url,
        model=template.model,
        api_key=endpoint.api_key,
        key_source=endpoint.key_source,
        seed=seed,
        temperature=template.request.temperature if template.request.temperature is not None else 0.0,
        api=template.request.api,
        timeouts=template.timeouts,
        samples=samples,
        after="claim",
        extra_headers=dict(template.request.extra_headers),
    )
    items = resolve_suites([], samples, seed)
    result = await run_quality(items, settings, directory / QUALITY_DIR)
    claim.requests_sent += len(items)
    overall = result.overall
    claim.quality = ClaimQuality(overall=overall, suites=dict(result.suites))
    return Condition(
        dimension="quality",
        value=f"{len(items)} items",
        held=None,
        figures=ConditionFigures(accuracy=overall.accuracy, right=overall.right, wrong=overall.wrong),
        run_dir=QUALITY_DIR,
        note="reported beside the speed; not part of the verdict",
    )
