"""Pure parts of the fake server: config, tokenizer, stream plan, pacer (no sockets)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tokenrace.fakes.fake_config import FakeConfig, merge_overrides
from tokenrace.fakes.fake_openai import (
    ResponseMeta,
    chat_prompt_tokens,
    completion_prompt_tokens,
    count_tokens,
    token_text,
)
from tokenrace.fakes.fake_plan import GenRequest, Pacer, Step, plan_stream, token_groups

META = ResponseMeta("chatcmpl-x", 0, "fake-model", "chat")


def gen(
    config: FakeConfig,
    output: int = 10,
    reasoning: int = 0,
    fault: str | None = None,
    usage: bool = False,
    meta: ResponseMeta = META,
) -> GenRequest:
    return GenRequest(meta, config, 3, output, reasoning, "stop", usage, fault)


def plan(req: GenRequest) -> list[Step]:
    return list(plan_stream(req))


def kinds(steps: list[Step]) -> list[str]:
    return [s.kind for s in steps]


def test_count_tokens_is_whitespace_words() -> None:
    assert count_tokens("") == 0
    assert count_tokens("  one two\tthree\nfour  ") == 4
    assert count_tokens(token_text(0, 7)) == 7
    assert token_text(2, 3) == "w2 w3 w4 "


def test_prompt_tokens_chat_and_completions() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a b c"}, {"type": "image_url"}]},
        {"role": "assistant", "content": None},
    ]
    assert chat_prompt_tokens(messages) == 5
    assert completion_prompt_tokens("a b") == 2
    assert completion_prompt_tokens(["a b", "c"]) == 3
    assert completion_prompt_tokens([1, 2, 3]) == 3
    assert completion_prompt_tokens([[1, 2], [3]]) == 3


@given(st.integers(0, 50), st.integers(0, 200), st.integers(1, 17))
def test_token_groups_cover_tokens_in_order(start: int, count: int, per_chunk: int) -> None:
    groups = token_groups(start, count, per_chunk)
    assert sum(size for _, size in groups) == count
    assert all(1 <= size <= per_chunk for _, size in groups)
    assert all(size == per_chunk for _, size in groups[:-1])
    firsts = [first for first, _ in groups]
    assert firsts == list(range(start, start + count, per_chunk))


def test_config_validation() -> None:
    assert FakeConfig(fault=500).fault == "500"  # type: ignore[arg-type]
    assert FakeConfig.model_validate({"fault": "none"}).fault is None
    with pytest.raises(ValidationError):
        FakeConfig.model_validate({"ttft": 5})  # typo: forbidden, not ignored
    with pytest.raises(ValidationError):
        FakeConfig(tokens_per_chunk=0)
    with pytest.raises(ValidationError):
        FakeConfig.model_validate({"fault": "explode"})


def test_request_fault_ignores_server_rate_and_every() -> None:
    base = FakeConfig(fault="500", fault_rate=0.1, fault_every=5)
    merged = merge_overrides(base, {"fault": "stall"})
    assert (merged.fault, merged.fault_rate, merged.fault_every) == ("stall", 1.0, None)
    assert merge_overrides(base, {"fault": "stall", "fault_every": 2}).fault_every == 2
    assert merge_overrides(base, {}) is base


def test_plan_chat_stream_order() -> None:
    steps = plan(gen(FakeConfig(), output=3, usage=True))
    assert kinds(steps) == ["role", "content", "content", "content", "usage", "done"]
    assert [s.last_token for s in steps] == [None, 0, 1, 2, None, None]
    assert steps[-1].data == b"data: [DONE]\n\n"


def test_plan_groups_tokens_per_chunk() -> None:
    steps = plan(gen(FakeConfig(tokens_per_chunk=3, role_chunk=False), output=10))
    content = [s for s in steps if s.kind == "content"]
    assert [s.tokens for s in content] == [3, 3, 3, 1]
    assert [s.last_token for s in content] == [2, 5, 8, 9]


def test_plan_reasoning_first_and_split_from_content() -> None:
    steps = plan(gen(FakeConfig(tokens_per_chunk=2), output=5, reasoning=3))
    assert kinds(steps) == ["role", "reasoning", "reasoning", "content", "done"]
    assert [s.tokens for s in steps[1:4]] == [2, 1, 2]  # a chunk never mixes the two
    assert b"reasoning_content" in steps[1].data and b'"w0 w1 "' in steps[1].data
    assert b'"content":"w3 w4 "' in steps[3].data


def test_plan_completions_has_no_role_chunk() -> None:
    meta = ResponseMeta("cmpl-x", 0, "fake-model", "completions")
    steps = plan(gen(FakeConfig(), output=2, meta=meta))
    assert kinds(steps) == ["content", "content", "done"]
    assert b'"object":"text_completion"' in steps[0].data


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("truncate", ["role", "content", "content"]),
        ("disconnect_midstream", ["role", "content", "content", "abort"]),
        (
            "malformed",
            ["role", "content", "content", "malformed", "content", "content", "content", "done"],
        ),
        ("stall", ["role", "content", "content", "stall", "content", "content", "content", "done"]),
    ],
)
def test_plan_faults(fault: str, expected: list[str]) -> None:
    assert kinds(plan(gen(FakeConfig(), output=5, fault=fault))) == expected


def test_plan_truncate_never_sends_the_finish_chunk() -> None:
    steps = plan(gen(FakeConfig(fault_after_chunks=10), output=3, fault="truncate"))
    assert kinds(steps) == ["role", "content", "content"]
    assert all(b'"finish_reason":null' in s.data for s in steps)


def test_plan_empty_output() -> None:
    steps = plan(gen(FakeConfig(), output=0, fault="empty", usage=True))
    assert kinds(steps) == ["role", "content", "usage", "done"]
    assert steps[1].tokens == 0 and b'"finish_reason":"stop"' in steps[1].data


def test_pacer_deadlines_are_absolute() -> None:
    pacer = Pacer(1_000, FakeConfig(ttft_ms=10, itl_ms=2), random.Random(0), others=0)
    assert pacer.deadline(0, 0) == 1_000 + 10_000_000
    assert pacer.deadline(1, 0) == 1_000 + 12_000_000
    assert pacer.deadline(4, 0) == 1_000 + 18_000_000  # skipped tokens still count
    pacer.shift(5_000_000)
    assert pacer.deadline(5, 0) == 1_000 + 25_000_000


def test_pacer_load_adds_per_other_request() -> None:
    config = FakeConfig(ttft_ms=10, itl_ms=2, load_ttft_ms=3, load_itl_ms=1)
    pacer = Pacer(0, config, random.Random(0), others=4)
    assert pacer.deadline(0, 4) == 22_000_000
    assert pacer.deadline(1, 2) == 22_000_000 + 4_000_000


@given(st.integers(0, 2**31), st.floats(0, 20))
def test_pacer_jitter_bounded_and_monotonic(seed: int, jitter: float) -> None:
    config = FakeConfig(ttft_ms=5, itl_ms=1, jitter_ms=jitter)
    pacer = Pacer(0, config, random.Random(seed), others=0)
    deadlines = [pacer.deadline(i, 0) for i in range(30)]
    assert deadlines == sorted(deadlines)
    for i, d in enumerate(deadlines):
        assert d <= round((5 + i + jitter) * 1e6) + 1
