"""The fake server's simulated prefix cache, its TTFT model, engine timings and session log."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenrace.fakes.fake_cache import PrefixCache
from tokenrace.fakes.fake_config import FakeConfig
from tokenrace.fakes.fake_openai import ResponseMeta
from tokenrace.fakes.fake_plan import GenRequest, Pacer
from tokenrace.fakes.fake_server import FakeServerThread

from .fake_helpers import apost, post

WORDS = [f"x{i}" for i in range(40)]


def words(n: int, start: int = 0) -> str:
    return " ".join(WORDS[start : start + n])


# --- the cache alone -----------------------------------------------------------------------


def test_second_identical_prompt_hits_whole_blocks_only() -> None:
    cache = PrefixCache(block_size=4)
    first = cache.lookup_and_insert(words(10))
    again = cache.lookup_and_insert(words(10))
    assert (first.cached_tokens, first.blocks_total) == (0, 2)
    assert (again.cached_tokens, again.blocks_hit) == (8, 2)  # the 2-word tail is no whole block


def test_shared_beginning_hits_and_an_early_change_misses_everything() -> None:
    cache = PrefixCache(block_size=4)
    cache.lookup_and_insert(words(12))
    assert cache.lookup_and_insert(words(8) + " other words here now").cached_tokens == 8
    busted = "tag " + words(12)
    assert cache.lookup_and_insert(busted).cached_tokens == 0


def test_blocks_chain_on_the_whole_prefix() -> None:
    """A block matches only after the same beginning: the same words later in a prompt are no hit."""
    cache = PrefixCache(block_size=2)
    cache.lookup_and_insert("a b c d")
    assert cache.lookup_and_insert("c d a b").cached_tokens == 0
    assert cache.lookup_and_insert("ab c d").cached_tokens == 0  # word boundaries count


def test_capacity_evicts_least_recent_and_tails_first() -> None:
    cache = PrefixCache(block_size=1, capacity_blocks=3)
    cache.lookup_and_insert("a b c")
    cache.lookup_and_insert("z")  # evicts the tail "c" (least recent), not the head "a"
    assert len(cache) == 3
    assert cache.lookup_and_insert("a b c").cached_tokens == 2


def test_chars_unit_counts_only_whole_words_in_the_cached_prefix() -> None:
    cache = PrefixCache(block_size=5, unit="chars")
    text = "abc defgh ij"  # blocks "abc d", "efgh " ; "ij" is a partial block
    cache.lookup_and_insert(text)
    hit = cache.lookup_and_insert(text)
    assert hit.blocks_hit == 2
    assert hit.cached_tokens == 2  # "abc" and "defgh" lie wholly in the first 10 characters
    cut = PrefixCache(block_size=5, unit="chars")
    cut.lookup_and_insert(text)
    assert cut.lookup_and_insert("abc dxxxx").cached_tokens == 1  # "dxxxx" is cut: not cached


def test_bad_geometry_is_refused() -> None:
    with pytest.raises(ValueError, match="block_size"):
        PrefixCache(0)
    with pytest.raises(ValueError, match="capacity_blocks"):
        PrefixCache(4, capacity_blocks=0)


@given(
    st.lists(st.lists(st.sampled_from("abcd"), min_size=0, max_size=12), min_size=1, max_size=12),
    st.integers(1, 4),
)
def test_hit_is_the_longest_whole_block_prefix_seen_before(prompts: list[list[str]], block: int) -> None:
    """Model check: with unbounded capacity, cached = the longest common prefix with any earlier
    prompt, rounded down to whole blocks (and never past the prompt's own whole blocks)."""
    cache = PrefixCache(block_size=block)
    seen: list[list[str]] = []
    for prompt in prompts:
        best = 0
        for old in seen:
            common = 0
            while common < min(len(old), len(prompt)) and old[common] == prompt[common]:
                common += 1
            best = max(best, common)
        expected = (best // block) * block
        assert cache.lookup_and_insert(" ".join(prompt)).cached_tokens == expected
        seen.append(prompt)


# --- TTFT and timings --------------------------------------------------------------------


def _gen(config: FakeConfig, prompt: int, cached: int | None) -> GenRequest:
    meta = ResponseMeta("chatcmpl-x", 0, "fake-model", "chat")
    return GenRequest(meta, config, prompt, 4, 0, "stop", True, None, cached)


def test_pacer_charges_prefill_for_uncached_tokens_only() -> None:
    config = FakeConfig(ttft_ms=10, itl_ms=1, prefill_ms_per_token=0.5)
    cold = _gen(config, prompt=100, cached=None)
    warm = _gen(config, prompt=100, cached=80)
    assert (cold.uncached_tokens, warm.uncached_tokens) == (100, 20)
    assert Pacer(0, config, random.Random(0), 0, cold.uncached_tokens).deadline(0, 0) == 60_000_000
    assert Pacer(0, config, random.Random(0), 0, warm.uncached_tokens).deadline(0, 0) == 20_000_000


def test_usage_and_timings_shapes() -> None:
    req = _gen(FakeConfig(ttft_ms=10, itl_ms=2, prefill_ms_per_token=1, engine_timings=True), 30, 16)
    assert req.usage()["prompt_tokens_details"] == {"cached_tokens": 16}
    timings = req.timings()
    assert timings is not None
    assert timings["cache_n"] == 16 and timings["prompt_n"] == 14 and timings["prompt_ms"] == 24
    assert timings["predicted_n"] == 4 and timings["predicted_ms"] == 6
    off = _gen(FakeConfig(), 30, None)
    assert "prompt_tokens_details" not in off.usage() and off.timings() is None


# --- over HTTP ---------------------------------------------------------------------------

CACHED = {
    "ttft_ms": 1.0,
    "itl_ms": 0.5,
    "output_tokens": 4,
    "prefix_cache": True,
    "cache_block_size": 4,
    "prefill_ms_per_token": 2.0,
    "engine_timings": True,
}


@pytest.fixture(scope="module")
def cached_server() -> Any:
    with FakeServerThread(CACHED) as server:
        yield server


@pytest.fixture
def csrv(cached_server: FakeServerThread) -> FakeServerThread:
    cached_server.reset()
    return cached_server


def _chat(system: str, user: str, stream: bool = True) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    body: dict[str, Any] = {"model": "fake-model", "messages": messages, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _server_ttft_ms(entry: dict[str, Any]) -> float:
    first = next(c for c in entry["chunks"] if c["kind"] == "content")
    return float(first["t_ns"] - entry["arrival_ns"]) / 1e6


def test_cached_tokens_in_usage_log_and_ttft(csrv: FakeServerThread) -> None:
    url = f"{csrv.base_url}/chat/completions"
    system = words(20)
    cold = post(url, _chat(system, "first question"), {"X-Session-ID": "s-1"})
    warm = post(url, _chat(system, "second question"), {"X-Session-ID": "s-1"})
    usage = [r.chunks()[-1]["usage"] for r in (cold, warm)]
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in usage] == [0, 20]
    assert [u["prompt_tokens"] for u in usage] == [22, 22]
    last_token_chunk = [c for c in warm.chunks() if c["choices"] and c["choices"][0]["finish_reason"]][0]
    assert last_token_chunk["timings"]["cache_n"] == 20 and last_token_chunk["timings"]["prompt_n"] == 2
    log = csrv.log(wait_idle_s=5)
    assert [e["cached_tokens"] for e in log] == [0, 20]
    assert [e["session_id"] for e in log] == ["s-1", "s-1"]
    assert [e["messages"] for e in log] == [2, 2]
    # 1 + 2 x 22 = 45 ms cold; 1 + 2 x 2 = 5 ms warm (sends are never early, maybe a little late)
    cold_ttft, warm_ttft = (_server_ttft_ms(e) for e in log)
    assert 45 <= cold_ttft < 75
    assert 5 <= warm_ttft < 35


def test_non_streaming_body_and_reset_empties_the_cache(csrv: FakeServerThread) -> None:
    url = f"{csrv.base_url}/chat/completions"
    post(url, _chat(words(8), "q", stream=False))
    body = post(url, _chat(words(8), "q", stream=False)).json()
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 8}
    assert body["timings"]["cache_n"] == 8
    assert csrv.stats()["cache_blocks"] == 2
    csrv.reset()
    assert csrv.stats()["cache_blocks"] == 0
    again = post(url, _chat(words(8), "q", stream=False)).json()
    assert again["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert csrv.log()[0]["session_id"] is None


def test_completions_prompt_is_cached_too(csrv: FakeServerThread) -> None:
    url = f"{csrv.base_url}/completions"
    body = {"model": "fake-model", "prompt": words(9), "stream": False}
    post(url, body)
    assert post(url, body).json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 8}
    assert csrv.log()[-1]["messages"] is None


def test_injected_error_neither_hits_nor_fills(csrv: FakeServerThread) -> None:
    url = f"{csrv.base_url}/chat/completions"
    refused = post(url, _chat(words(8), "q", stream=False), {"x-fake-fault": "500"})
    assert refused.status == 500
    assert csrv.stats()["cache_blocks"] == 0
    assert csrv.log()[0]["cached_tokens"] is None


def test_cache_off_by_default_and_custom_session_header() -> None:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0.5, "output_tokens": 2, "session_header": "X-Conv"}) as srv:

        async def twice() -> list[Any]:
            async with aiohttp.ClientSession() as session:
                url = f"{srv.base_url}/chat/completions"
                body = _chat(words(8), "q", stream=False)
                return [(await apost(session, url, body, {"X-Conv": f"c{i}"})).json() for i in range(2)]

        bodies = asyncio.run(twice())
        assert all("prompt_tokens_details" not in b["usage"] and "timings" not in b for b in bodies)
        log = srv.log()
        assert [e["session_id"] for e in log] == ["c0", "c1"]
        assert [e["cached_tokens"] for e in log] == [None, None]
