"""The building blocks end to end, through the real client and the fake server's simulated cache:
a multi-turn session carries the model's real answers and its header, shared prefixes hit, busted
prompts do not."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.fakes.fake_openai import chat_prompt_text, count_tokens
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.load.workloads.prefixes import bust, shared_prefixes
from tokenrace.load.workloads.sessions import Conversation, Turn, session_prompt
from tokenrace.model.records import RequestRecord

from .helpers import WordTokenizer

BLOCK = 4


@pytest.fixture
def cached() -> Iterator[FakeServerThread]:
    config = {"ttft_ms": 1, "itl_ms": 0.2, "output_tokens": 6, "prefix_cache": True, "cache_block_size": BLOCK}
    with FakeServerThread(config) as srv:
        yield srv


async def _send_all(base_url: str, prompts: list[Prompt]) -> list[RequestRecord]:
    async with OpenAIClient(base_url, "fake-model", options=RequestOptions(max_tokens=None)) as client:
        return [await client.send(p, RequestRecord(seq=i)) for i, p in enumerate(prompts)]


async def _converse(base_url: str, conversation: Conversation) -> tuple[list[Prompt], list[RequestRecord]]:
    """What a runner does for one session: send each turn with the answers received so far."""
    answers: list[str] = []
    prompts, records = [], []
    async with OpenAIClient(base_url, "fake-model", options=RequestOptions(max_tokens=None)) as client:
        for turn in range(1, len(conversation.turns) + 1):
            prompt = session_prompt(conversation, turn, answers)
            rec = await client.send(prompt, RequestRecord(seq=turn, session_id=conversation.id, turn=turn))
            assert rec.ok, rec.error_message
            answers.append(rec.text)
            prompts.append(prompt)
            records.append(rec)
    return prompts, records


def test_session_history_header_and_cache(cached: FakeServerThread) -> None:
    conv = Conversation("chat/7 é", (Turn("first question here"), Turn("second one"), Turn("third")), system="be brief")
    prompts, records = asyncio.run(_converse(cached.base_url, conv))
    log = cached.log(wait_idle_s=5)
    assert [e["session_id"] for e in log] == ["chat_7__"] * 3  # made header-safe
    assert [e["messages"] for e in log] == [2, 4, 6]
    third = prompts[2].as_messages()
    assert [m["content"] for m in third if m["role"] == "assistant"] == [records[0].text, records[1].text]
    assert records[0].text  # the fake's real answer, not a file's
    # turn n+1's prompt begins with turn n's whole prompt: its whole blocks are cached
    sizes = [count_tokens(chat_prompt_text(p.as_messages())) for p in prompts]
    assert [r.cached_tokens for r in records] == [0, sizes[0] // BLOCK * BLOCK, sizes[1] // BLOCK * BLOCK]
    assert [e["cached_tokens"] for e in log] == [r.cached_tokens for r in records]
    assert all(r.cached_tokens_source == "usage" for r in records)


def test_shared_prefix_hits_and_busting_defeats_it(cached: FakeServerThread) -> None:
    prefixes = asyncio.run(shared_prefixes(24, 2, WordTokenizer(), seed=5))
    groups = [0, 1, 0, 1, 0]
    shared = [prefixes.apply(Prompt(text=f"question number {i}"), g) for i, g in enumerate(groups)]
    records = asyncio.run(_send_all(cached.base_url, shared))
    assert [r.cached_tokens for r in records] == [0, 0, 24, 24, 24]
    cached.reset()
    busted = [bust(p, "run9", seq) for seq, p in enumerate(shared)]
    records = asyncio.run(_send_all(cached.base_url, busted))
    assert [r.cached_tokens for r in records] == [0] * 5
