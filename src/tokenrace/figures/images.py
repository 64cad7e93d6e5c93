"""The summary's `images`: what the requests' images weighed, and TTFT split by image count.

Over the succeeded measured requests. When a run mixes requests with and without images, the
difference of TTFT p50 (with - without) comes with its bootstrap interval: the images' own cost, on
the same server, under the same load.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import Difference, ImageCountTTFT, ImageFigures
from tokenrace.stats import describe, difference_ci


def _ttfts(records: Sequence[RequestRecord]) -> list[float]:
    return [r.ttft_ms for r in records if r.ttft_ms is not None]


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def image_figures(ok: Sequence[RequestRecord]) -> ImageFigures | None:
    """None when no request carried an image."""
    carried = [r for r in ok if r.images]
    if not carried:
        return None
    counts = sorted({r.images for r in ok})
    by_count = [
        ImageCountTTFT(images=n, requests=len(rs), ttft_ms=describe(_ttfts(rs)))
        for n in counts
        for rs in [[r for r in ok if r.images == n]]
    ]
    return ImageFigures(
        requests_with_images=len(carried),
        images=sum(r.images for r in carried),
        image_bytes=describe([r.image_bytes for r in carried if r.image_bytes is not None]),
        image_pixels=describe([r.image_pixels for r in carried if r.image_pixels is not None]),
        by_count=by_count,
        ttft_difference_ms=_difference(_ttfts([r for r in ok if not r.images]), _ttfts(carried)),
    )


def _difference(without: list[float], with_images: list[float]) -> Difference | None:
    if not without or not with_images:
        return None
    diff, low, high = difference_ci(without, with_images, stat="p50")
    return Difference(
        with_images=describe(with_images).p50,
        without_images=describe(without).p50,
        difference=_r(diff),
        ci_low=_r(low),
        ci_high=_r(high),
    )
