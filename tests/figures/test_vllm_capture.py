"""tokenrace's readers on a /metrics page captured from a real vLLM (0.32.0, CPU build, ngram
speculative decoding on; tests/fixtures/metrics/README.md says how it was taken).

The "before" page is the same page with every counter, gauge and histogram at zero, as a freshly
started engine has it, so each figure is the capture's own total.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokenrace.figures.cache import server_cache
from tokenrace.figures.engine_clock import from_metrics_delta
from tokenrace.figures.speculative import speculative_section

PAGE = (Path(__file__).parents[1] / "fixtures" / "metrics" / "vllm_cpu_0.32.0_spec_ngram.txt").read_text()
ZERO = re.sub(r"^(vllm:\S+) \S+$", r"\1 0.0", PAGE, flags=re.MULTILINE)


def value(series: str) -> float:
    match = re.search(rf"^{re.escape(series)}\{{[^}}]*\}} (\S+)$", PAGE, re.MULTILINE)
    assert match, series
    return float(match[1])


def test_speculative_totals_are_the_pages_counters() -> None:
    spec = speculative_section("vllm", ZERO, PAGE)
    assert spec is not None
    assert spec.drafts == value("vllm:spec_decode_num_drafts_total")
    assert spec.draft_tokens == value("vllm:spec_decode_num_draft_tokens_total")
    assert spec.accepted_tokens == value("vllm:spec_decode_num_accepted_tokens_total")
    assert spec.acceptance_rate == pytest.approx(spec.accepted_tokens / spec.draft_tokens)
    # num_speculative_tokens 3: one per-position series each, never summed into the totals.
    assert spec.per_position is not None and len(spec.per_position) == 3
    assert sum(spec.per_position) * spec.drafts == pytest.approx(spec.accepted_tokens)


def test_prefix_cache_counters() -> None:
    cache = server_cache("vllm", ZERO, PAGE)
    assert cache is not None
    assert cache.queries == value("vllm:prefix_cache_queries_total")
    assert cache.hits == value("vllm:prefix_cache_hits_total")
    assert cache.hit_rate == pytest.approx(cache.hits / cache.queries, abs=1e-6)


def test_the_engine_clock_reads_the_per_request_tpot_histogram() -> None:
    clock = from_metrics_delta("vllm", ZERO, PAGE, None, None)
    assert clock is not None
    name = "vllm:request_time_per_output_token_seconds"
    expected = value(f"{name}_sum") / value(f"{name}_count")
    assert clock.tpot_ms.server_mean == pytest.approx(expected * 1000, abs=1e-3)
    ttft = value("vllm:time_to_first_token_seconds_sum") / value("vllm:time_to_first_token_seconds_count")
    assert clock.ttft_ms.server_mean == pytest.approx(ttft * 1000, abs=1e-3)
