"""The stream tap: what it forwards for any split of the bytes, what it counts, the error event."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import parse_all

from tokenrace.fakes.fake_openai import (
    ResponseMeta,
    delta_chunk,
    role_chunk,
    sse,
    text_chunk,
    usage_block,
    usage_chunk,
)
from tokenrace.gateway.stream import DONE, Endpoint, StreamTap, Usage, error_event

META = ResponseMeta("chatcmpl-1", 1700000000, "m", "chat")
USAGE = sse(usage_chunk(META, usage_block(7, 5, 0)))


def chat_stream(tokens: int = 5, usage: bool = True) -> bytes:
    events = [sse(role_chunk(META))]
    events += [
        sse(delta_chunk(META, {"content": f"w{i} "}, "stop" if i == tokens - 1 else None)) for i in range(tokens)
    ]
    if usage:
        events.append(USAGE)
    return b"".join(events) + DONE


def feed_split(tap: StreamTap, data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [tap.feed(data[a:b], i) for i, (a, b) in enumerate(zip(points, points[1:], strict=False))]


def only_whole_events(forwarded: bytes) -> bool:
    """True when the client holds no half event: a blank line would not complete another one."""
    return len(parse_all(forwarded)) == len(parse_all(forwarded + b"\n\n"))


STREAMS = st.sampled_from(
    [
        chat_stream(),
        chat_stream(usage=False),
        chat_stream().replace(b"\n", b"\r\n"),
        b": keep-alive\n\n" + chat_stream(3) + b": bye\n\n",
        b"event: message\nid: 1\n" + chat_stream(2),
        b'data: {"choices": [{"delta": {"content": "a"}}]\ndata: }\n\n' + DONE,
    ]
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(STREAMS, st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_any_split_forwards_every_byte_in_whole_events(stream: bytes, cuts: list[int]) -> None:
    tap = StreamTap("chat")
    pieces = feed_split(tap, stream, cuts)
    tap.close()
    assert b"".join(pieces) == stream
    sent = b""
    for piece in pieces:
        sent += piece
        assert only_whole_events(sent)
    one_shot = StreamTap("chat")
    one_shot.feed(stream, 0)
    assert (tap.done, tap.content_chunks, tap.usage, tap.finish_reason) == (
        one_shot.done,
        one_shot.content_chunks,
        one_shot.usage,
        one_shot.finish_reason,
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4000), max_size=10))
def test_usage_the_client_did_not_ask_for_is_removed_for_any_split(cuts: list[int]) -> None:
    stream = chat_stream()
    tap = StreamTap("chat", strip_usage=True)
    forwarded = b"".join(feed_split(tap, stream, cuts))
    assert forwarded == stream.replace(USAGE, b"")
    assert tap.usage == Usage(prompt_tokens=7, completion_tokens=5, total_tokens=12)


def test_counts_tokens_and_times_and_id() -> None:
    tap = StreamTap("chat")
    events = [e.data.encode() for e in parse_all(chat_stream())]
    for i, data in enumerate(events):
        tap.feed(b"data: " + data + b"\n\n", 1000 + i)
    assert tap.first_token_ns == 1001 and tap.last_token_ns == 1005  # the role chunk is not a token
    assert tap.content_chunks == 5 and tap.output_tokens() == (5, "usage") and tap.prompt_tokens() == 7
    assert tap.done and tap.finish_reason == "stop" and tap.response_id == "chatcmpl-1" and tap.model == "m"
    assert tap.tpot_s() == (1005 - 1001) / 1e9 / 4


def test_without_usage_the_chunks_are_counted() -> None:
    tap = StreamTap("chat")
    tap.feed(chat_stream(usage=False), 0)
    assert tap.output_tokens() == (5, "chunks") and tap.prompt_tokens() is None


def test_completions_stream_and_text_kept_for_shadow() -> None:
    meta = ResponseMeta("cmpl-1", 0, "m", "completions")
    stream = sse(text_chunk(meta, "hello ", None)) + sse(text_chunk(meta, "world", "length")) + DONE
    tap = StreamTap("completions", keep_text=True)
    tap.feed(stream, 0)
    assert tap.text() == "hello world" and tap.content_chunks == 2 and tap.finish_reason == "length"


def test_a_partial_event_waits_and_a_ping_does_not() -> None:
    tap = StreamTap("chat")
    first = sse(role_chunk(META))
    assert tap.feed(first[:10], 0) == b""
    assert tap.feed(first[10:] + b": ping\n\n", 1) == first + b": ping\n\n"
    assert tap.feed(b": ping\n\n", 2) == b": ping\n\n"
    assert tap.held_partial is False


def test_malformed_events_are_passed_on_and_counted() -> None:
    tap = StreamTap("chat")
    assert tap.feed(b"data: {not json\n\n", 0) == b"data: {not json\n\n"
    assert tap.malformed == 1


def test_error_event_shape() -> None:
    tap = StreamTap("chat")
    tap.feed(b"".join(sse(delta_chunk(META, {"content": f"w{i} "}, None)) for i in range(3)), 0)
    raw = error_event(tap, "backend 'a' failed mid-stream: reset", "disconnect", "gw-1")
    events = [e.data for e in parse_all(raw)]
    assert events[-1] == "[DONE]" and len(events) == 2
    body = orjson.loads(events[0])
    assert body["id"] == "chatcmpl-1" and body["object"] == "chat.completion.chunk" and body["model"] == "m"
    assert body["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "error"}]
    assert body["usage"] == {
        "prompt_tokens": None,
        "completion_tokens": 3,
        "total_tokens": None,
        "completion_tokens_source": "chunks",
    }
    assert body["error"] == {
        "message": "backend 'a' failed mid-stream: reset",
        "type": "upstream_error",
        "param": None,
        "code": "disconnect",
    }
    done = StreamTap("completions")
    body = orjson.loads(parse_all(error_event(done, "x", "truncated", "gw-2"))[0].data)
    assert body["id"] == "gw-2" and body["choices"][0]["text"] == "" and body["usage"]["completion_tokens"] == 0


PIECES = [
    '"',
    "\\",
    "a",
    " ",
    "\n",
    "é",
    "{",
    "}",
    ":",
    ",",
    '"content":"',
    '"finish_reason":null',
    "[DONE]",
    '"usage":{',
    '"text":""',
]
texts = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["content", "reasoning_content", "none", "tool"]), texts), min_size=1, max_size=6
    ),
    st.booleans(),
)
def test_skimmed_events_count_exactly_as_parsed_ones(deltas: list[tuple[str, str]], chat: bool) -> None:
    endpoint: Endpoint = "chat" if chat else "completions"
    meta = ResponseMeta("id-1", 1, "m", endpoint)
    events = [sse(role_chunk(meta))] if chat else []
    for field, text in deltas:
        if not chat:
            events.append(sse(text_chunk(meta, text, None)))
        elif field == "none":
            events.append(sse(delta_chunk(meta, {"content": None}, None)))
        elif field == "tool":
            events.append(
                sse(
                    delta_chunk(
                        meta, {"content": None, "tool_calls": [{"index": 0, "function": {"arguments": text}}]}, None
                    )
                )
            )
        else:
            events.append(sse(delta_chunk(meta, {field: text}, None)))
    events.append(DONE)
    fast, slow = StreamTap(endpoint), StreamTap(endpoint, keep_text=True)  # keep_text forces the full parse
    for i, event in enumerate(events):
        assert fast.feed(event, i) == slow.feed(event, i) == event
    assert (fast.content_chunks, fast.first_token_ns, fast.last_token_ns, fast.finish_reason) == (
        slow.content_chunks,
        slow.first_token_ns,
        slow.last_token_ns,
        slow.finish_reason,
    )
