"""The reference profiles' figures (figures/reference.py), each against its reference's definition,
on records whose stamps are known exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tokenrace.errors import InvalidInput
from tokenrace.figures.reference import (
    aa_e2e_100_tokens,
    aa_output_speed,
    endpoints_system_tps,
    endpoints_tpot_ms,
    llmperf_inter_token_latency,
    llmperf_request_output_throughput,
    reference_section,
)
from tokenrace.load.profiles import PROFILES, profile
from tokenrace.model.records import RequestRecord
from tokenrace.report.reference import pareto_front
from tokenrace.stats import spread

MS = 1_000_000


def rec(seq: int, start_ms: float, chunks_ms: list[float], tokens: list[int] | None, out: int | None) -> RequestRecord:
    r = RequestRecord(seq=seq, start_ns=int(start_ms * MS))
    r.chunk_ns = [int((start_ms + c) * MS) for c in chunks_ms]
    r.first_token_ns = r.chunk_ns[0] if r.chunk_ns else None
    r.end_ns = (r.chunk_ns[-1] if r.chunk_ns else int(start_ms * MS)) + 5 * MS
    r.chunk_tokens = tokens
    r.output_tokens = out
    return r


def test_aa_output_speed_excludes_the_first_token_and_its_wait() -> None:
    # First token at 200 ms, 11 tokens, the last at 700 ms: 10 tokens in 0.5 s after the first.
    r = rec(0, 0, [200 + 50 * i for i in range(11)], [1] * 11, 11)
    assert aa_output_speed(r) == pytest.approx(20.0)
    # End-to-end for 100 tokens: TTFT 0.2 s + 100 tokens at 20 tok/s.
    assert aa_e2e_100_tokens(r) == pytest.approx(0.2 + 5.0)
    assert aa_output_speed(rec(1, 0, [200], [1], 1)) is None  # one token: no time after the first


def test_llmperf_divides_the_time_to_the_last_token_by_every_token() -> None:
    # As token_benchmark_ray.py: the gaps' sum (send -> last content chunk) / output tokens.
    r = rec(0, 0, [200, 300, 400, 600], [1, 1, 1, 1], 4)
    assert llmperf_inter_token_latency(r) == pytest.approx(0.6 / 4)
    # Per-request output throughput: tokens / end-to-end (the stream ends 5 ms after the last chunk).
    assert llmperf_request_output_throughput(r) == pytest.approx(4 / 0.605)


def test_endpoints_tpot_counts_the_tokens_after_the_first_chunk() -> None:
    # The first chunk carries 3 tokens: 7 tokens follow over completion (605 ms) - first chunk (200 ms).
    r = rec(0, 0, [200, 300, 600], [3, 3, 4], 10)
    assert endpoints_tpot_ms(r) == pytest.approx(405 / 7)
    a, b = rec(1, 0, [100, 200], [1, 1], 2), rec(2, 100, [100, 400], [1, 1], 2)
    # 4 tokens over the first send (0) to the last completion (505 ms).
    assert endpoints_system_tps([a, b]) == pytest.approx(4 / 0.505, abs=1e-3)


def test_spread_is_numpy_linear_percentiles() -> None:
    values = [float(v) for v in range(1, 21)]
    s = spread(values)
    for k, q in (("p5", 5), ("p25", 25), ("p50", 50), ("p75", 75), ("p95", 95)):
        assert getattr(s, k) == pytest.approx(float(np.percentile(values, q)))
    assert spread([]).p50 is None and spread([]).count == 0


def test_reference_section_per_profile() -> None:
    rs = [rec(i, i * 1000, [100 + 10 * k for k in range(5)], [1] * 5, 5) for i in range(4)]
    assert reference_section(None, rs, 1) is None
    aa = reference_section("aa", rs, 1)
    assert aa is not None and aa.aa is not None and aa.llmperf is None
    assert aa.aa.output_speed_tok_s.p50 == pytest.approx(100.0)
    assert aa.source.startswith("https://artificialanalysis.ai")
    lp = reference_section("llmperf", rs, 5)
    assert lp is not None and lp.llmperf is not None and lp.llmperf.num_completed_requests == 4
    ep = reference_section("endpoints", rs, 4)
    assert ep is not None and ep.endpoints is not None
    # Every request in flight at once is the offline point; fewer in flight is not.
    assert ep.endpoints.offline and ep.endpoints.tps_per_user == pytest.approx(1000 / ep.endpoints.tpot_p90_ms, 1e-3)
    two = reference_section("endpoints", rs, 2)
    assert two is not None and two.endpoints is not None and not two.endpoints.offline
    with pytest.raises(InvalidInput):
        reference_section("nope", rs, 1)


def test_profiles_carry_the_references_workloads() -> None:
    assert (profile("aa").input_tokens, profile("aa").output_tokens) == (10_000, 1_500)
    assert (profile("aa-1k").input_tokens, profile("aa-100k").output_tokens) == (1_000, 2_000)
    assert profile("aa-parallel").concurrency == 10
    lp = profile("llmperf")
    assert (lp.input_tokens, lp.output_tokens, lp.requests, lp.concurrency) == (550, 150, 150, 5)
    ep = profile("endpoints")
    assert ep.concurrencies is not None and len(ep.concurrencies) >= 7 and ep.offline
    assert all(b == 2 * a for a, b in zip(ep.concurrencies, ep.concurrencies[1:], strict=False))
    assert all(p.cache_bust for p in PROFILES.values() if p.reference == "aa")


def test_pareto_front_keeps_the_points_no_other_beats() -> None:
    pts = [(100.0, 50.0, "c1"), (180.0, 45.0, "c2"), (170.0, 30.0, "c4"), (300.0, 20.0, "c8")]
    assert [p[2] for p in pareto_front(pts)] == ["c1", "c2", "c8"]
