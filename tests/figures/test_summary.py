from __future__ import annotations

import pytest

from tokenrace.errors import UsageError
from tokenrace.figures.client_load import ClientObservation, client_load, client_warning
from tokenrace.figures.summary import parse_slo, summarize
from tokenrace.load.calibration import ClientCeiling
from tokenrace.load.windows import Windows
from tokenrace.model.records import RequestRecord

MS = 1_000_000


def rec(
    seq: int, start_ms: float, chunks_ms: list[float], tokens: list[int] | None, out: int | None, **kw: object
) -> RequestRecord:
    r = RequestRecord(seq=seq, start_ns=int(start_ms * MS))
    r.chunk_ns = [int((start_ms + c) * MS) for c in chunks_ms]
    r.first_token_ns = r.chunk_ns[0] if r.chunk_ns else None
    r.first_answer_ns = r.first_token_ns
    r.end_ns = (r.chunk_ns[-1] if r.chunk_ns else int(start_ms * MS)) + 1 * MS
    r.chunk_tokens = tokens
    r.output_tokens = out
    r.output_tokens_source = "usage" if out is not None else None
    for k, v in kw.items():
        setattr(r, k, v)
    r.settle(0)
    return r


def test_ttft_tpot_itl_definitions() -> None:
    # Chunks at 100, 110, 130 ms carrying 1, 2, 4 tokens: 7 tokens.
    r = rec(0, 0, [100, 110, 130], [1, 2, 4], 7)
    s = summarize([r], Windows())
    m = s.metrics
    assert m.ttft_ms.p50 == 100
    assert m.tpot_ms.p50 == pytest.approx(30 / 6)
    assert sorted([m.itl_chunk_ms.min, m.itl_chunk_ms.max]) == [10, 20]
    # itl_token: 10/2 weighted 2, 20/4 weighted 4 -> all six values are 5.0
    assert m.itl_token_ms.count == 6 and m.itl_token_ms.p50 == 5.0
    assert m.tokens_per_chunk.mean == pytest.approx(7 / 3, abs=1e-4)


def test_undefined_is_none_never_zero() -> None:
    r = rec(0, 0, [100], [1], 1)  # one token: TPOT undefined
    s = summarize([r], Windows())
    assert s.metrics.tpot_ms.count == 0 and s.metrics.tpot_ms.p50 is None
    assert s.metrics.schedule_lag_ms.mean is None
    assert s.throughput.steady_output_tokens_per_s is None
    empty = summarize([], Windows())
    assert empty.error_rate is None and empty.throughput.output_tokens_per_s is None


def test_errors_rates_and_goodput() -> None:
    good = rec(0, 0, [100, 120], [1, 1], 2)
    slow = rec(1, 0, [900, 920], [1, 1], 2)
    bad = rec(2, 0, [], None, None)
    bad.fail("http_500", "boom", 500)
    cancelled = rec(3, 0, [], None, None)
    cancelled.fail("cancelled", "ctrl-c")
    s = summarize([good, slow, bad, cancelled], Windows(), slo={"ttft_ms": 500})
    assert s.requests.model_dump() == {"total": 3, "succeeded": 2, "failed": 1, "cancelled": 1}
    assert s.error_rate == pytest.approx(1 / 3)
    assert s.errors_by_kind == {"http_500": 1}
    assert s.goodput.requests == 1 and s.goodput.fraction == pytest.approx(1 / 3)


def test_throughput_windows() -> None:
    a = rec(0, 0, [100, 200], [1, 1], 2)
    b = rec(1, 0, [150, 1000], [1, 1], 2)
    w = Windows(steady_start_ns=0, steady_end_ns=500 * MS, max_in_flight=2)
    s = summarize([a, b], w)
    assert s.throughput.window_s == pytest.approx(1.001)
    assert s.throughput.output_tokens_per_s == pytest.approx(4 / 1.001, rel=1e-3)
    assert s.throughput.steady_output_tokens_per_s == pytest.approx(3 / 0.5)
    assert s.max_in_flight == 2


def test_token_sources_are_reported() -> None:
    a = rec(0, 0, [1, 2], None, 2)
    b = rec(1, 0, [1, 2], None, 2, output_tokens_source="chunks")
    s = summarize([a, b], Windows())
    assert s.token_count_source.output_tokens == {"usage": 1, "chunks": 1}
    assert s.token_count_source.approximate is True


def test_parse_slo() -> None:
    assert parse_slo("ttft=500ms,tpot=50ms,e2e=10s") == {"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": 10000}
    assert parse_slo(None) is None
    with pytest.raises(UsageError):
        parse_slo("speed=fast")
    with pytest.raises(UsageError):
        parse_slo("ttft=soon")


def test_tokens_per_chunk_mean_pools_known_and_usage_only_requests() -> None:
    known = rec(0, 0, [100, 110, 130], [1, 2, 4], 7)
    usage_only = rec(1, 0, [100, 110], None, 9)
    from_chunks = rec(2, 0, [100, 110], None, 2, output_tokens_source="chunks")  # says nothing new
    m = summarize([known, usage_only, from_chunks], Windows()).metrics.tokens_per_chunk
    assert m.count == 5 and m.mean == pytest.approx(16 / 5)
    assert m.p50 is None
    # every counted request known per chunk: the full distribution
    full = summarize([known], Windows()).metrics.tokens_per_chunk
    assert full.count == 3 and full.p50 == 2.0
    # no token total but the chunk count: undefined, not 1
    assert summarize([from_chunks], Windows()).metrics.tokens_per_chunk.mean is None


def test_client_load_cpu_alone_makes_a_run_client_bound_even_uncalibrated() -> None:
    r = rec(0, 0, [100, 110, 130], [1, 2, 4], 7)
    busy = client_load([r], 2.0, 1, ClientObservation(95.0, None))
    assert busy.client_bound is True and "95 % of a core" in busy.causes[0]
    warning = client_warning(busy)
    assert warning is not None and "client may have limited" in warning.message and warning.code == "client.bound"
    idle = client_load([r], 2.0, 1, ClientObservation(10.0, None))
    assert idle.client_bound is None and client_warning(idle) is None and idle.chunks_per_s == 1.5
    none_within = client_load([r], 2.0, 1, ClientObservation(10.0, ClientCeiling(None, None)))
    assert none_within.client_bound is True and "no load" in none_within.causes[0]
