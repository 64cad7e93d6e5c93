"""The client's numbers against the fake server's own log of when it sent each event.

The server runs in another process; perf_counter_ns is CLOCK_MONOTONIC there and here, so the two
clocks can be compared directly. Bounds are generous (shared 2-core CI machines); the tight figures
live in benchmarks/client_accuracy.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from tests.conftest import run

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.figures.summary import summarize
from tokenrace.load.tokens import fill_token_counts
from tokenrace.load.windows import Windows
from tokenrace.model.records import RequestRecord


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_fake_server({"ttft_ms": 60, "itl_ms": 8, "output_tokens": 12}) as srv:
        yield srv


async def _send(base_url: str, n: int, overrides: dict[str, Any] | None = None, **opts: Any) -> list[RequestRecord]:
    options = RequestOptions(max_tokens=None, extra_body={"fake": overrides} if overrides else {}, **opts)
    async with OpenAIClient(base_url, "fake-model", options=options) as c:
        recs = await asyncio.gather(*(c.send(Prompt(text="one two three"), RequestRecord(seq=i)) for i in range(n)))
        for r in recs:
            await fill_token_counts(r, "one two three", None)
            r.settle(0)  # as the run store does when it writes the record
        return list(recs)


def _sent(
    log: list[dict[str, Any]], rid: str | None, kinds: tuple[str, ...] = ("content", "reasoning")
) -> list[dict[str, Any]]:
    entry = next(e for e in log if e["id"] == rid)
    return [c for c in entry["chunks"] if c["kind"] in kinds]


@pytest.mark.slow
def test_ttft_ignores_role_chunk_and_matches_send_log(server: Any) -> None:
    server.reset()
    recs = run(_send(server.base_url, 4))
    log = server.log(wait_idle_s=2)
    for r in recs:
        assert r.ok, r.error_message
        sent = _sent(log, r.response_id)
        assert len(r.chunk_ns) == len(sent) == 12
        biases = [(c - s["t_ns"]) / 1e6 for c, s in zip(r.chunk_ns, sent, strict=False)]
        assert 0 <= min(biases) and float(np.median(biases)) < 5.0
        role = _sent(log, r.response_id, ("role",))[0]
        assert r.first_token_ns > role["t_ns"] + 40e6  # the role chunk came ~60 ms earlier
        assert r.ttft_ms >= 60.0


def test_multi_token_chunks_and_usage(server: Any) -> None:
    server.reset()
    # 42 tokens in 9 chunks: one stall of this shared machine at the first or last chunk moves the TPOT
    # by a 41st of itself, so the 1 ms bound holds through a 40 ms stall.
    recs = run(_send(server.base_url, 2, {"tokens_per_chunk": 5, "output_tokens": 42}))
    log = server.log(wait_idle_s=2)
    for r in recs:
        assert r.output_tokens == 42 and r.output_tokens_source == "usage"
        assert len(r.chunk_ns) == 9
        assert r.prompt_tokens == 3 and r.prompt_tokens_source == "usage"
        sent = _sent(log, r.response_id)
        assert [c["tokens"] for c in sent] == [5] * 8 + [2]
        assert r.chunk_tokens is None or sum(r.chunk_tokens) == 42
        true_tpot = (sent[-1]["t_ns"] - sent[0]["t_ns"]) / 1e6 / 41
        tpot = r.tpot_ms
        assert tpot is not None and abs(tpot - true_tpot) < 1.0


def test_usage_absent_falls_back_to_chunks_flagged(server: Any) -> None:
    recs = run(_send(server.base_url, 1, {"usage": "never"}))
    r = recs[0]
    assert r.usage is None and r.output_tokens == 12 and r.output_tokens_source == "chunks"
    assert r.chunk_tokens is None  # counting chunks tells nothing about tokens per chunk


def test_include_usage_switch_off(server: Any) -> None:
    recs = run(_send(server.base_url, 1, include_usage=False))
    assert recs[0].usage is None and recs[0].output_tokens_source == "chunks"


def test_reasoning_first_gives_separate_answer_time(server: Any) -> None:
    server.reset()
    r = run(_send(server.base_url, 1, {"reasoning_tokens": 4}))[0]
    log = server.log(wait_idle_s=2)
    first_reasoning = _sent(log, r.response_id, ("reasoning",))[0]["t_ns"]
    first_answer = _sent(log, r.response_id, ("content",))[0]["t_ns"]
    assert r.reasoning_chunks == 4
    assert 0 <= r.first_token_ns - first_reasoning < 20e6
    assert 0 <= r.first_answer_ns - first_answer < 20e6
    assert r.first_answer_ns > r.first_token_ns


def test_non_streaming_has_e2e_but_no_ttft(server: Any) -> None:
    r = run(_send(server.base_url, 1, stream=False))[0]
    assert r.ok and r.ttft_ms is None and r.tpot_ms is None
    assert r.e2e_ms >= 60 + 11 * 8 * 0.9
    assert r.output_tokens == 12 and r.output_tokens_source == "usage"


def test_completions_endpoint(server: Any) -> None:
    r = run(_send(server.base_url, 1, api="completions"))[0]
    assert r.ok and len(r.chunk_ns) == 12 and r.finish_reason == "stop"


def test_tokens_per_chunk_mean_from_usage_without_a_tokenizer(server: Any) -> None:
    recs = run(_send(server.base_url, 3, {"tokens_per_chunk": 5, "output_tokens": 12}))
    assert all(r.chunk_tokens is None and r.output_tokens_source == "usage" for r in recs)
    tpc = summarize(recs, Windows()).metrics.tokens_per_chunk
    # 12 tokens in 3 chunks (5, 5, 2) per request: exact as a mean; no spread without per-chunk counts
    assert tpc.count == 9 and tpc.mean == 4.0
    assert tpc.p50 is None and tpc.std is None and tpc.max is None
