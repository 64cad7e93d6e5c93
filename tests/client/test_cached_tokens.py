"""Prefix-cache accounting: cached_tokens and its source, against the fake server's simulated cache."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from tests.conftest import run

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.client.records import cached_tokens_of
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.model.records import RequestRecord

SYSTEM = " ".join(f"s{i}" for i in range(24))  # 24 toy tokens: 6 blocks of 4


@pytest.fixture
def cached() -> Iterator[FakeServerThread]:
    config = {
        "ttft_ms": 1,
        "itl_ms": 0.5,
        "output_tokens": 4,
        "prefix_cache": True,
        "cache_block_size": 4,
        "engine_timings": True,
    }
    with FakeServerThread(config) as srv:
        yield srv


def _prompt(question: str) -> Prompt:
    return Prompt(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])


async def _twice(base_url: str, **opts: Any) -> list[RequestRecord]:
    options = RequestOptions(max_tokens=None, **opts)
    async with OpenAIClient(base_url, "fake-model", options=options) as client:
        first = await client.send(_prompt("what is one"), RequestRecord(seq=0))
        second = await client.send(_prompt("what is two"), RequestRecord(seq=1))
    return [first, second]


@pytest.mark.parametrize("stream", [True, False])
def test_cached_tokens_from_usage(cached: FakeServerThread, stream: bool) -> None:
    first, second = run(_twice(cached.base_url, stream=stream))
    assert first.ok and second.ok
    assert (first.cached_tokens, first.cached_tokens_source) == (0, "usage")
    assert (second.cached_tokens, second.cached_tokens_source) == (24, "usage")
    assert [e["cached_tokens"] for e in cached.log(wait_idle_s=5)] == [0, 24]  # what the server did


def test_cached_tokens_from_engine_timings_without_usage(cached: FakeServerThread) -> None:
    """llama.cpp's `timings.cache_n` is the source when usage is not asked for."""
    first, second = run(_twice(cached.base_url, stream=True, include_usage=False))
    assert second.usage is None
    assert (first.cached_tokens, first.cached_tokens_source) == (0, "engine")
    assert (second.cached_tokens, second.cached_tokens_source) == (24, "engine")


def test_unknown_without_a_cache_report(fake: FakeServerThread) -> None:
    first, _ = run(_twice(fake.base_url, stream=True))
    assert first.ok and first.usage is not None
    assert (first.cached_tokens, first.cached_tokens_source) == (None, None)


def test_records_line_carries_cache_and_session_fields(cached: FakeServerThread) -> None:
    _, second = run(_twice(cached.base_url, stream=True))
    second.session_id, second.turn = "conv-7", 3
    second.settle(second.start_ns)
    line = orjson.loads(second.model_dump_json())
    assert line["cached_tokens"] == 24 and line["cached_tokens_source"] == "usage"
    assert line["session_id"] == "conv-7" and line["turn"] == 3
    fresh = RequestRecord(seq=0).model_dump(mode="json")
    assert fresh["session_id"] is None and fresh["turn"] is None and fresh["cached_tokens"] is None


def test_engine_timings_are_saved_as_sent_and_read_back_typed(cached: FakeServerThread) -> None:
    _, second = run(_twice(cached.base_url, stream=True))
    assert second.server_timing is not None and second.server_timing["cache_n"] == 24
    second.settle(second.start_ns)
    line = orjson.loads(second.model_dump_json())
    assert line["server_timing"] == second.server_timing  # records.jsonl keeps the server's object
    timing = RequestRecord.model_validate(line).server_timing
    assert timing is not None and timing.get("cache_n") == 24 and timing.get("predicted_n") == 4
    assert timing.get("prompt_ms") == second.server_timing.get("prompt_ms")
    newer = RequestRecord.model_validate({**line, "server_timing": {**line["server_timing"], "n_ctx": 4096}})
    assert newer.server_timing is not None and newer.server_timing.get("n_ctx") == 4096  # a key a server adds is kept
    assert RequestRecord.model_validate({**line, "server_timing": None}).server_timing is None


@pytest.mark.parametrize(
    ("usage", "timings", "expected"),
    [
        ({"prompt_tokens_details": {"cached_tokens": 5}}, {"cache_n": 9}, (5, "usage")),
        ({"prompt_tokens_details": None}, {"cache_n": 9}, (9, "engine")),  # vLLM without the flag
        ({"prompt_tokens_details": {"cached_tokens": True}}, None, (None, None)),
        ({"prompt_tokens_details": {"cached_tokens": -1}}, {"cache_n": "3"}, (None, None)),
        (None, {"cache_n": 0}, (0, "engine")),
        (None, None, (None, None)),
        ("not a dict", ["nor this"], (None, None)),
    ],
)
def test_cached_tokens_of(usage: Any, timings: Any, expected: tuple[int | None, str | None]) -> None:
    assert cached_tokens_of(usage, timings) == expected
