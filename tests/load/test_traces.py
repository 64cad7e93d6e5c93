"""Trace replay: the three formats, offsets and speed, and prompts that share blocks as the trace says."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tokenrace.errors import UsageError
from tokenrace.fakes.fake_cache import PrefixCache
from tokenrace.load.workloads.traces import (
    Trace,
    TracePromptBuilder,
    load_trace,
    parse_azure,
    parse_jsonl,
    parse_mooncake,
)

from .helpers import CharTokenizer, WordTokenizer


def mooncake(*rows: dict[str, object]) -> list[str]:
    return [orjson.dumps(r).decode() for r in rows]


def test_mooncake_offsets_speed_and_order() -> None:
    trace = parse_mooncake(
        mooncake(
            {"timestamp": 1500, "input_length": 10, "output_length": 5, "hash_ids": [1]},
            {"timestamp": 500, "input_length": 20, "output_length": 7, "hash_ids": [1, 2]},
            {"timestamp": 2500, "input_length": 30, "output_length": 9, "hash_ids": [3]},
        ),
        "t.jsonl",
    )
    assert trace.format == "mooncake" and trace.duration_s == 2.0
    assert [r.line for r in trace.requests] == [2, 1, 3]  # sorted by time, lines kept for messages
    assert trace.offsets() == [0.0, 1.0, 2.0]
    assert trace.offsets(speed=2) == [0.0, 0.5, 1.0]
    assert trace.offsets(speed=0.5) == [0.0, 2.0, 4.0]
    assert trace.requests[0].hash_ids == (1, 2) and trace.requests[0].output_tokens == 7
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(UsageError, match="trace speed"):
            trace.offsets(bad)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"input_length": 1, "output_length": 1}, '"timestamp" must be a number'),
        ({"timestamp": 0, "input_length": "9", "output_length": 1}, '"input_length" must be a whole number'),
        ({"timestamp": 0, "input_length": 1, "output_length": 0}, "output length must be at least 1"),
        ({"timestamp": 0, "input_length": 0, "output_length": 1}, "input length must be at least 1"),
        ({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, "x"]}, '"hash_ids" must be a list'),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_mooncake_errors_name_the_line(row: object, message: str) -> None:
    lines = [*mooncake({"timestamp": 0, "input_length": 1, "output_length": 1}), "", orjson.dumps(row).decode()]
    with pytest.raises(UsageError, match=rf"^t\.jsonl:3: .*{message}"):
        parse_mooncake(lines, "t.jsonl")


def test_azure_csv() -> None:
    lines = [
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2023-11-16 18:15:46.6805900,374,44",
        "2023-11-16 18:15:50.9951690,396,109",
        "",
        "2023-11-16 18:15:47.1000000,879,21",
    ]
    trace = parse_azure(lines, "az.csv")
    assert [round(o, 6) for o in trace.offsets()] == [0.0, 0.41941, 4.314579]
    assert [(r.input_tokens, r.output_tokens, r.line) for r in trace.requests] == [
        (374, 44, 2),
        (879, 21, 5),
        (396, 109, 3),
    ]
    assert all(r.hash_ids == () for r in trace.requests)
    with pytest.raises(UsageError, match=r"az\.csv:1: the header lacks GeneratedTokens"):
        parse_azure(["TIMESTAMP,ContextTokens", "x,1"], "az.csv")
    with pytest.raises(UsageError, match=r"az\.csv:2: TIMESTAMP 'yesterday'"):
        parse_azure(["TIMESTAMP,ContextTokens,GeneratedTokens", "yesterday,1,1"], "az.csv")
    with pytest.raises(UsageError, match=r"az\.csv:2: ContextTokens must be a whole number"):
        parse_azure(["TIMESTAMP,ContextTokens,GeneratedTokens", "2024-01-01 00:00:00,many,1"], "az.csv")
    with pytest.raises(UsageError, match="no requests"):
        parse_azure(["TIMESTAMP,ContextTokens,GeneratedTokens"], "az.csv")


def test_plain_jsonl() -> None:
    lines = [
        '{"timestamp_s": 0.25, "input_tokens": 12, "output_tokens": 3}',
        '{"timestamp_s": 0.75, "prompt": "say hi to me", "output_tokens": 4}',
    ]
    trace = parse_jsonl(lines, "p.jsonl")
    assert trace.offsets() == [0.0, 0.5]
    assert trace.requests[1].prompt == "say hi to me" and trace.requests[1].input_tokens == 4
    with pytest.raises(UsageError, match=r'p\.jsonl:1: "output_tokens"'):
        parse_jsonl(['{"timestamp_s": 0, "input_tokens": 1}'], "p.jsonl")
    with pytest.raises(UsageError, match="not both"):
        parse_jsonl(['{"timestamp_s": 0, "prompt": "x", "hash_ids": [1], "output_tokens": 1}'], "p.jsonl")


def test_load_trace_reads_files_and_checks_the_format(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(mooncake({"timestamp": 0, "input_length": 3, "output_length": 2, "hash_ids": [9]})))
    assert load_trace(path, "mooncake").requests[0].input_tokens == 3
    with pytest.raises(UsageError, match="trace format must be one of mooncake, azure, jsonl"):
        load_trace(path, "burstgpt")
    with pytest.raises(UsageError, match="cannot read"):
        load_trace(tmp_path / "none.jsonl", "jsonl")
    path.write_text("{oops\n")
    with pytest.raises(UsageError, match=r"m\.jsonl:1: not JSON"):
        load_trace(path, "mooncake")


def _shared_trace() -> Trace:
    return parse_mooncake(
        mooncake(
            {"timestamp": 0, "input_length": 20, "output_length": 5, "hash_ids": [1, 2, 3]},
            {"timestamp": 10, "input_length": 22, "output_length": 6, "hash_ids": [1, 2, 4]},
            {"timestamp": 20, "input_length": 16, "output_length": 7, "hash_ids": [1, 2]},
            {"timestamp": 30, "input_length": 9, "output_length": 8, "hash_ids": [5, 6]},
            {"timestamp": 40, "input_length": 14, "output_length": 8, "hash_ids": [5]},  # longer than its blocks
        ),
        "shared.jsonl",
    )


def test_prompts_share_exactly_the_blocks_the_trace_shares() -> None:
    """Replayed through the fake server's cache model (block = trace block, tokens = words)."""
    trace = _shared_trace()
    builder = TracePromptBuilder(trace, WordTokenizer(), block_tokens=8, seed=3, nonce="run1")
    built = asyncio.run(builder.build_all())
    assert [b.tokens for b in built] == [b.target for b in built] == [20, 22, 16, 9, 14]
    assert [b.prompt.max_tokens for b in built] == [5, 6, 7, 8, 8]
    cache = PrefixCache(block_size=8)
    hits = [cache.lookup_and_insert(b.prompt.as_text()).cached_tokens for b in built]
    # 2nd: blocks 1, 2 shared; 3rd: its 16 tokens are blocks 1 and 2; 4th: new; 5th: block 5 shared
    assert hits == [0, 16, 16, 0, 8]


def test_prompts_are_deterministic_and_differ_between_runs() -> None:
    trace = _shared_trace()
    run = lambda nonce: [b.prompt.text for b in asyncio.run(TracePromptBuilder(trace, None, 8, 3, nonce).build_all())]
    assert run("a") == run("a")
    cache = PrefixCache(block_size=8)
    for text in run("a"):
        cache.lookup_and_insert(text or "")
    # a second run (new nonce) hits nothing the first one left behind
    assert cache.lookup_and_insert(run("b")[0] or "").cached_tokens == 0


def test_prompts_without_a_tokenizer_are_one_word_per_token() -> None:
    built = asyncio.run(TracePromptBuilder(_shared_trace(), None, block_tokens=8, nonce="n").build_all())
    assert [len((b.prompt.text or "").split()) for b in built] == [20, 22, 16, 9, 14]
    assert all(b.tokens is None for b in built)


def test_unique_prompts_for_traces_without_blocks_and_given_prompts() -> None:
    azure = parse_azure(["TIMESTAMP,ContextTokens,GeneratedTokens", *["2024-01-01 00:00:00,40,2"] * 3], "az.csv")
    built = asyncio.run(TracePromptBuilder(azure, CharTokenizer(), nonce="n").build_all())
    assert [b.tokens for b in built] == [40, 40, 40]
    cache = PrefixCache(block_size=1)
    assert [cache.lookup_and_insert(b.prompt.text or "").cached_tokens for b in built] == [0, 0, 0]
    plain = parse_jsonl(['{"timestamp_s": 0, "prompt": "exactly this", "output_tokens": 2}'], "p.jsonl")
    assert asyncio.run(TracePromptBuilder(plain, None).build(0)).prompt.text == "exactly this"
    with pytest.raises(UsageError, match="block size"):
        TracePromptBuilder(plain, None, block_tokens=0)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"timestamp_s": 0, "prompt": 5, "output_tokens": 1}, '"prompt" must be a string'),
        ({"timestamp_s": 0, "output_tokens": 1}, '"input_tokens" must be a whole number of tokens, got None'),
        ({"timestamp_s": -1, "input_tokens": 1, "output_tokens": 1}, '"timestamp_s" must be a number >= 0, got -1'),
        ({"timestamp_s": 0, "input_tokens": True, "output_tokens": 1}, '"input_tokens" must be a whole number'),
    ],
)
def test_plain_jsonl_errors_name_the_line_and_the_field(row: object, message: str) -> None:
    with pytest.raises(UsageError, match=rf"^p\.jsonl:1: {message}"):
        parse_jsonl([orjson.dumps(row).decode()], "p.jsonl")
