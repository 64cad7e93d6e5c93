"""Each API's request body, headers and answer reader, without a socket: the exact shapes sent and
what a record takes from what comes back."""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson
import pytest

from tokenrace.client.apis import api_for
from tokenrace.client.conversation import ChatMessage
from tokenrace.client.openai import OpenAIClient
from tokenrace.client.request import Prompt, RequestOptions, RequestSpec
from tokenrace.model.records import RequestRecord

SYSTEM_AND_USER: list[ChatMessage] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hello there"},
]


def _body(api: str, prompt: Prompt, **opts: Any) -> dict[str, Any]:
    options = RequestOptions(api=api, **opts)
    return api_for(options).body(RequestSpec("m", prompt, options))


def _headers(api: str, key: str | None = "k-123456") -> dict[str, str]:
    return OpenAIClient("http://h:1/v1", "m", key, RequestOptions(api=api)).headers()


def test_chat_body_is_what_it_always_was() -> None:
    body = _body("chat", Prompt(messages=SYSTEM_AND_USER), temperature=0.5, seed=3)
    assert body == {
        "model": "m",
        "stream": True,
        "messages": SYSTEM_AND_USER,
        "max_tokens": 256,
        "temperature": 0.5,
        "seed": 3,
        "stream_options": {"include_usage": True},
    }
    assert _body("completions", Prompt(text="hi"), max_tokens=None)["prompt"] == "hi"


def test_responses_body() -> None:
    body = _body("responses", Prompt(messages=SYSTEM_AND_USER, max_tokens=9), temperature=0.0, seed=3)
    assert body == {"model": "m", "input": SYSTEM_AND_USER, "stream": True, "max_output_tokens": 9, "temperature": 0.0}
    parts: list[ChatMessage] = [{"role": "user", "content": [{"type": "text", "text": "t"}]}]
    assert _body("responses", Prompt(messages=parts))["input"][0]["content"] == [{"type": "input_text", "text": "t"}]


def test_messages_body_moves_system_out_and_always_sets_max_tokens() -> None:
    body = _body("messages", Prompt(messages=SYSTEM_AND_USER), max_tokens=None, seed=3, extra_body={"top_k": 5})
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 4096,
        "stream": True,
        "system": "be brief",
        "top_k": 5,
    }


def test_embeddings_and_rerank_bodies() -> None:
    assert _body("embeddings", Prompt(inputs=["a b", "c"]), extra_body={"dimensions": 4}) == {
        "model": "m",
        "input": ["a b", "c"],
        "dimensions": 4,
    }
    rerank = Prompt(text="q?", documents=["d1", "d2", "d3"])
    assert _body("rerank", rerank) == {"model": "m", "query": "q?", "documents": ["d1", "d2", "d3"], "top_n": 3}
    assert _body("rerank", rerank, rerank_format="tei") == {"query": "q?", "texts": ["d1", "d2", "d3"]}


@pytest.mark.parametrize(
    ("api", "fmt", "url"),
    [
        ("chat", "cohere", "http://h:1/v1/chat/completions"),
        ("responses", "cohere", "http://h:1/v1/responses"),
        ("messages", "cohere", "http://h:1/v1/messages"),
        ("embeddings", "cohere", "http://h:1/v1/embeddings"),
        ("rerank", "cohere", "http://h:1/v1/rerank"),
        ("rerank", "tei", "http://h:1/rerank"),
    ],
)
def test_urls(api: str, fmt: str, url: str) -> None:
    assert OpenAIClient("http://h:1/v1", "m", options=RequestOptions(api=api, rerank_format=fmt)).url == url


def test_messages_authenticate_with_x_api_key_never_authorization() -> None:
    h = _headers("messages")
    assert h["x-api-key"] == "k-123456" and h["anthropic-version"] == "2023-06-01"
    assert not any(k.lower() == "authorization" for k in h)
    assert "x-api-key" not in _headers("messages", None) and _headers("messages", None)["anthropic-version"]
    for api in ("chat", "responses", "embeddings", "rerank"):
        h = _headers(api)
        assert h["Authorization"] == "Bearer k-123456" and "x-api-key" not in h and "anthropic-version" not in h


def _feed(api: str, events: list[dict[str, Any]]) -> RequestRecord:
    rec = RequestRecord(seq=0)
    reader = api_for(RequestOptions(api=api)).stream_reader(rec)
    for t, event in enumerate(events, 1):
        reader.on_event(orjson.dumps(event).decode(), t * 1000)
    reader.end()
    if not reader.done:
        rec.fail("truncated", "no end")
    return rec


RESPONSES_STREAM: list[dict[str, Any]] = [
    {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
    {"type": "response.in_progress", "response": {"id": "resp_1"}},
    {"type": "response.reasoning_text.delta", "item_id": "rs", "delta": "think "},
    {"type": "response.reasoning_summary_text.delta", "item_id": "rs", "delta": "more "},
    {"type": "response.output_item.added", "item": {"type": "message"}},
    {"type": "response.output_text.delta", "item_id": "msg", "delta": "Hello"},
    {"type": "response.output_text.delta", "item_id": "msg", "delta": ""},
    {"type": "response.output_text.delta", "item_id": "msg", "delta": " world"},
    {"type": "response.output_text.done", "item_id": "msg", "text": "Hello world"},
    {
        "type": "response.completed",
        "response": {
            "id": "resp_1",
            "status": "completed",
            "usage": {
                "input_tokens": 20,
                "input_tokens_details": {"cached_tokens": 16},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 2},
                "total_tokens": 25,
            },
        },
    },
]


def test_responses_stream() -> None:
    rec = _feed("responses", RESPONSES_STREAM)
    assert rec.ok and rec.response_id == "resp_1" and rec.finish_reason == "completed"
    # Three content chunks at the arrival of each delta: empty deltas and envelopes are not content.
    assert rec.chunk_ns == [3000, 4000, 6000, 8000] and rec.reasoning_chunks == 2
    assert rec.first_token_ns == 3000 and rec.first_answer_ns == 6000
    assert rec.text == "think more Hello world"
    assert rec.usage == {
        "prompt_tokens": 20,
        "completion_tokens": 5,
        "total_tokens": 25,
        "prompt_tokens_details": {"cached_tokens": 16},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    assert (rec.cached_tokens, rec.cached_tokens_source) == (16, "usage")


def test_responses_cut_by_max_output_tokens_is_complete_not_truncated() -> None:
    end = {"type": "response.incomplete", "response": {"status": "incomplete"}}
    end["response"]["incomplete_details"] = {"reason": "max_output_tokens"}
    end["response"]["usage"] = {"input_tokens": 3, "output_tokens": 1}
    rec = _feed("responses", [{"type": "response.output_text.delta", "delta": "x"}, end])
    assert (
        rec.ok
        and rec.finish_reason == "max_output_tokens"
        and rec.usage == {"prompt_tokens": 3, "completion_tokens": 1}
    )
    assert rec.cached_tokens is None  # not reported: unknown, never 0


def test_responses_failures() -> None:
    failed = {"type": "response.failed", "response": {"error": {"code": "server_error", "message": "boom"}}}
    rec = _feed("responses", [failed])
    assert rec.error_kind == "stream_error" and "boom" in (rec.error_message or "")
    rec = _feed("responses", [{"type": "error", "code": "x", "message": "bad thing"}])
    assert rec.error_kind == "stream_error" and "bad thing" in (rec.error_message or "")
    rec = _feed("responses", RESPONSES_STREAM[:-1])
    assert rec.error_kind == "truncated"


MESSAGES_STREAM: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "content": [],
            "usage": {
                "input_tokens": 4,
                "cache_read_input_tokens": 10,
                "cache_creation_input_tokens": 2,
                "output_tokens": 1,
            },
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm "}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "xyz"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "!"}},
    {"type": "content_block_stop", "index": 1},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 7},
    },
    {"type": "message_stop"},
]


def test_messages_stream() -> None:
    rec = _feed("messages", MESSAGES_STREAM)
    assert rec.ok and rec.response_id == "msg_1" and rec.finish_reason == "end_turn"
    assert rec.chunk_ns == [4000, 8000, 9000] and rec.reasoning_chunks == 1  # a signature is not content
    assert rec.first_token_ns == 4000 and rec.first_answer_ns == 8000 and rec.text == "hmm Hi!"
    # Anthropic's input_tokens leave out the cache: the prompt is all three; the cache read is cached.
    assert rec.usage == {"prompt_tokens": 16, "prompt_tokens_details": {"cached_tokens": 10}, "completion_tokens": 7}
    assert (rec.cached_tokens, rec.cached_tokens_source) == (10, "usage")


def test_messages_error_and_truncation() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    rec = _feed("messages", [MESSAGES_STREAM[0], error])
    assert rec.error_kind == "stream_error" and rec.error_message == "Overloaded"
    assert _feed("messages", MESSAGES_STREAM[:-1]).error_kind == "truncated"


def _read(api: str, body: Any, fmt: str = "cohere", inputs: int | None = None) -> RequestRecord:
    rec = RequestRecord(seq=0, inputs=inputs)
    api_for(RequestOptions(api=api, rerank_format=fmt)).read_body(rec, body)
    return rec


def test_embeddings_answer() -> None:
    body = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": [0.1] * 576} for i in range(3)],
        "usage": {"prompt_tokens": 30, "total_tokens": 30},
    }
    rec = _read("embeddings", body, inputs=3)
    assert rec.ok and rec.embedding_dim == 576 and rec.usage == {"prompt_tokens": 30, "total_tokens": 30}
    assert _read("embeddings", body, inputs=4).error_kind == "incomplete"
    assert _read("embeddings", {**body, "data": []}).error_kind == "empty"
    assert _read("embeddings", [1, 2]).error_kind == "malformed_body"
    b64 = base64.b64encode(struct.pack("<4f", 1, 2, 3, 4)).decode()
    assert _read("embeddings", {"data": [{"embedding": b64}], "usage": {"total_tokens": 5}}).embedding_dim == 4
    # Nothing is generated: a usage with only total_tokens counts the input.
    assert _read("embeddings", {"data": [{"embedding": b64}], "usage": {"total_tokens": 5}}).usage == {
        "total_tokens": 5,
        "prompt_tokens": 5,
    }


def test_rerank_answers() -> None:
    cohere = {"id": "r", "results": [{"index": 1, "relevance_score": 0.9}], "usage": {"total_tokens": 12}}
    rec = _read("rerank", cohere)
    assert rec.ok and rec.response_id == "r" and rec.usage == {"total_tokens": 12, "prompt_tokens": 12}
    assert _read("rerank", [{"index": 0, "score": 0.5}], "tei").ok
    assert _read("rerank", {"results": []}).error_kind == "empty"
    assert _read("rerank", {"nothing": 1}).error_kind == "malformed_body"
