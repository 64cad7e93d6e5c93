"""The example files under examples/ load, and replay as their structure says."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from tokenrace.client.structured import read_schema, read_tools, tool_choice
from tokenrace.fakes.fake_cache import PrefixCache
from tokenrace.load.workloads.sessions import load_sharegpt, messages_for_turn
from tokenrace.load.workloads.traces import TracePromptBuilder, load_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_sample_conversations() -> None:
    loaded = load_sharegpt(EXAMPLES / "conversations.sharegpt.json")
    convs = loaded.conversations
    assert len(convs) == 6 and loaded.skipped == ()
    assert sum(len(c.turns) for c in convs) == 15
    assert any(c.system for c in convs) and any(len(c.turns) == 1 for c in convs)
    longest = max(convs, key=lambda c: len(c.turns))
    last = len(longest.turns)
    history = messages_for_turn(longest, last, [f"answer {i}" for i in range(1, last)])
    assert len(history) == 2 * last - 1 + (1 if longest.system else 0)


def test_sample_trace_shares_prefix_blocks_as_its_hash_ids_say() -> None:
    trace = load_trace(EXAMPLES / "trace.mooncake.jsonl", "mooncake")
    assert 30 <= len(trace.requests) <= 60 and trace.duration_s > 10
    assert all(len(r.hash_ids) == math.ceil(r.input_tokens / 512) for r in trace.requests)
    built = asyncio.run(TracePromptBuilder(trace, None, block_tokens=512, nonce="x").build_all())
    cache = PrefixCache(block_size=512)  # the toy tokenizer: one word, one token, as the builder's estimate
    seen: list[tuple[int, ...]] = []
    for request, prompt in zip(trace.requests, built, strict=True):
        # expected: the longest run of leading hash ids that an earlier request had (whole blocks only)
        best = 0
        for earlier in seen:
            common = 0
            while common < min(len(earlier), len(request.hash_ids)) and earlier[common] == request.hash_ids[common]:
                common += 1
            best = max(best, common)
        whole = request.input_tokens // 512
        expected = min(best, whole) * 512
        assert cache.lookup_and_insert(prompt.prompt.text or "").cached_tokens == expected, request.line
        seen.append(request.hash_ids[:whole])
    hits = sum(1 for r in trace.requests if r.hash_ids[:1] == (0,))
    assert hits >= 10  # the shared agent prompt appears often enough to matter


def test_sample_tools_and_schema_are_what_their_flags_take() -> None:

    tools = read_tools(str(EXAMPLES / "tools.json"))
    assert [t["function"]["name"] for t in tools] == ["get_weather", "search_docs"]
    assert tool_choice("get_weather", tools) == {"type": "function", "function": {"name": "get_weather"}}
    name, schema = read_schema(str(EXAMPLES / "person.schema.json"))
    assert name == "person" and schema["required"] == ["name", "age", "languages"]
