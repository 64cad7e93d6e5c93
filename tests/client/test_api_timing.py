"""Every API's numbers against the fake server's log of when it sent each event, as for chat
(tests/client/test_accuracy.py, with the same bounds): the server runs in another process and its
perf_counter_ns is the same CLOCK_MONOTONIC as the client's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from tests.conftest import run

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.tokens import fill_token_counts
from tokenrace.model.records import RequestRecord

# 40 tokens, so that one stall of this shared machine at the first or last chunk (16 ms was seen in
# a full run) moves the TPOT by under half a millisecond; the bound stays the chat tests' 1 ms.
TTFT_MS, ITL_MS, TOKENS = 60, 8, 40
PER_INPUT_MS, PER_DOCUMENT_MS = 4.0, 3.0


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    config = {
        "ttft_ms": TTFT_MS,
        "itl_ms": ITL_MS,
        "output_tokens": TOKENS,
        "embedding_ms_per_input": PER_INPUT_MS,
        "rerank_ms_per_document": PER_DOCUMENT_MS,
        "embedding_dim": 32,
    }
    with spawn_fake_server(config) as srv:
        yield srv


async def _send(
    base_url: str,
    api: str,
    prompts: list[Prompt],
    fake: dict[str, Any] | None = None,
    one_by_one: bool = False,
    **opts: Any,
) -> list[RequestRecord]:
    """Send the prompts together (or one after the other: then a stall of this shared machine lands on
    one request, not on all of them at once)."""
    options = RequestOptions(api=api, max_tokens=None, extra_body={"fake": fake} if fake else {}, **opts)
    async with OpenAIClient(base_url, "fake-model", options=options) as c:
        if one_by_one:
            recs = [await c.send(p, RequestRecord(seq=i)) for i, p in enumerate(prompts)]
        else:
            recs = await asyncio.gather(*(c.send(p, RequestRecord(seq=i)) for i, p in enumerate(prompts)))
        for r, p in zip(recs, prompts, strict=True):
            await fill_token_counts(r, p.as_text(), None)
            r.settle(0)  # as the run store does when it writes the record
        return list(recs)


def _entry(log: list[dict[str, Any]], rid: str | None) -> dict[str, Any]:
    return next(e for e in log if e["id"] == rid)


def _sent(entry: dict[str, Any], kinds: tuple[str, ...] = ("content", "reasoning")) -> list[dict[str, Any]]:
    return [c for c in entry["chunks"] if c["kind"] in kinds]


@pytest.mark.slow
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_streamed_apis_match_the_send_log(server: Any, api: str) -> None:
    server.reset()
    recs = run(_send(server.base_url, api, [Prompt(text="one two three")] * 4))
    log = server.log(wait_idle_s=2)
    for r in recs:
        assert r.ok, r.error_message
        entry = _entry(log, r.response_id)
        sent = _sent(entry)
        assert len(r.chunk_ns) == len(sent) == TOKENS
        biases = [(c - s["t_ns"]) / 1e6 for c, s in zip(r.chunk_ns, sent, strict=True)]
        assert 0 <= min(biases) and float(np.median(biases)) < 5.0
        opening = _sent(entry, ("role",))[0]  # created / message_start: not content
        assert r.first_token_ns > opening["t_ns"] + 40e6
        assert r.ttft_ms >= TTFT_MS
        true_tpot = (sent[-1]["t_ns"] - sent[0]["t_ns"]) / 1e6 / (TOKENS - 1)
        assert r.tpot_ms is not None and abs(r.tpot_ms - true_tpot) < 1.0
        assert r.e2e_ms >= TTFT_MS + (TOKENS - 1) * ITL_MS * 0.9
        assert (r.output_tokens, r.output_tokens_source) == (TOKENS, "usage")
        assert (r.prompt_tokens, r.prompt_tokens_source) == (3, "usage")
        assert r.text == "".join(f"w{i} " for i in range(TOKENS))


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_reasoning_then_answer_and_cached_tokens(server: Any, api: str) -> None:
    server.reset()
    fake = {"reasoning_tokens": 4, "prefix_cache": True, "cache_block_size": 2}
    first, second = (run(_send(server.base_url, api, [Prompt(text="a b c d e f g")], fake))[0] for _ in range(2))
    log = server.log(wait_idle_s=2)
    entry = _entry(log, second.response_id)
    assert second.reasoning_chunks == 4
    first_reasoning = _sent(entry, ("reasoning",))[0]["t_ns"]
    first_answer = _sent(entry, ("content",))[0]["t_ns"]
    assert 0 <= second.first_token_ns - first_reasoning < 20e6
    assert 0 <= second.first_answer_ns - first_answer < 20e6
    assert (first.cached_tokens, second.cached_tokens) == (0, 6) and second.cached_tokens_source == "usage"
    assert second.prompt_tokens == 7  # the cached tokens count in the prompt, whatever the API's own split


def test_max_tokens_cut_reads_as_a_complete_answer(server: Any) -> None:
    for api, reason in (("responses", "max_output_tokens"), ("messages", "max_tokens")):
        r = run(_send(server.base_url, api, [Prompt(text="x", max_tokens=3)]))[0]
        assert r.ok and r.finish_reason == reason and len(r.chunk_ns) == 3


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_not_streamed(server: Any, api: str) -> None:
    r = run(_send(server.base_url, api, [Prompt(text="one two")], stream=False))[0]
    assert r.ok and r.ttft_ms is None and r.tpot_ms is None
    assert r.e2e_ms >= TTFT_MS + (TOKENS - 1) * ITL_MS * 0.9
    assert r.output_tokens == TOKENS and r.text.startswith("w0 ")


def _body_biases_ms(recs: list[RequestRecord], log: list[dict[str, Any]]) -> list[float]:
    """Per request: the arrival of the answer's end - the server's send stamp of the body."""
    return [(r.end_ns - _sent(_entry(log, r.response_id), ("body",))[0]["t_ns"]) / 1e6 for r in recs]


@pytest.mark.slow
def test_embeddings_latency_is_the_programmed_time_per_input(server: Any) -> None:
    server.reset()
    sizes = (1, 8, 16) * 3
    batch = [Prompt(inputs=[f"text number {i} here" for i in range(n)]) for n in sizes]
    recs = run(_send(server.base_url, "embeddings", batch, one_by_one=True))
    log = server.log(wait_idle_s=2)
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    biases = _body_biases_ms(recs, log)
    assert 0 <= min(biases) and float(np.median(biases)) < 5.0
    for r, n in zip(recs, sizes, strict=True):
        entry = _entry(log, r.response_id)
        assert entry["inputs"] == n
        assert r.ttft_ms is None and r.tpot_ms is None and r.chunk_ns == []
        assert r.e2e_ms >= TTFT_MS + n * PER_INPUT_MS
        sent = _sent(entry, ("body",))[0]["t_ns"]
        assert (sent - entry["arrival_ns"]) / 1e6 >= TTFT_MS + n * PER_INPUT_MS
        assert r.inputs == n and r.embedding_dim == 32
        assert (r.prompt_tokens, r.prompt_tokens_source) == (4 * n, "usage") and r.output_tokens is None


@pytest.mark.parametrize("fmt", ["cohere", "tei"])
def test_rerank_latency_is_the_programmed_time_per_document(server: Any, fmt: str) -> None:
    server.reset()
    sizes = (2, 10) * 3
    prompts = [Prompt(text="which one", documents=[f"document {i}" for i in range(n)]) for n in sizes]
    recs = run(_send(server.base_url, "rerank", prompts, one_by_one=True, rerank_format=fmt))
    log = server.log(wait_idle_s=2)
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    biases = _body_biases_ms(recs, log)
    assert 0 <= min(biases) and float(np.median(biases)) < 5.0
    for r, n in zip(recs, sizes, strict=True):
        entry = _entry(log, r.response_id)
        assert entry["path"] == ("/rerank" if fmt == "tei" else "/v1/rerank") and entry["inputs"] == n
        assert r.e2e_ms >= TTFT_MS + n * PER_DOCUMENT_MS and r.documents == n


@pytest.mark.slow
def test_an_api_the_server_lacks_is_an_error_record_with_a_hint() -> None:
    with spawn_fake_server({"ttft_ms": 1, "apis": ["chat"]}) as srv:
        for api, fmt in (("embeddings", "cohere"), ("rerank", "cohere"), ("rerank", "tei"), ("messages", "cohere")):
            r = run(_send(srv.base_url, api, [Prompt(text="q", documents=["d"], inputs=["i"])], rerank_format=fmt))[0]
            assert r.status == 404 and r.error_kind == "http_404", r
            assert r.error_message is not None and "may not serve" in r.error_message
        r = run(_send(srv.base_url, "rerank", [Prompt(text="q", documents=["d"])]))[0]
        assert "tei rerank format" in (r.error_message or "")
