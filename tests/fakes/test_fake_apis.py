"""The fake server's Responses, Messages, embeddings and rerank APIs over HTTP: the event sequences,
bodies, usage, auth headers and the send log."""

from __future__ import annotations

from typing import Any

from tokenrace.fakes.fake_openai import token_text
from tokenrace.fakes.fake_server import FakeServerThread

from .fake_helpers import USER, post

HELLO = [{"role": "system", "content": "short"}, *USER]


def _types(events: list[Any]) -> list[str]:
    return [e["type"] for e in events if isinstance(e, dict)]


def test_responses_stream_events(srv: FakeServerThread) -> None:
    body = {"model": "fake-model", "input": HELLO, "stream": True, "max_output_tokens": 3}
    reply = post(f"{srv.base_url}/responses", body)
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/event-stream")
    types = _types(reply.events)
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert types.count("response.output_text.delta") == 3 and types[-1] == "response.incomplete"
    deltas = [e["delta"] for e in reply.events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == token_text(0, 3)
    final = reply.events[-1]["response"]
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["input_tokens"] == 5 and final["usage"]["output_tokens"] == 3  # "short" + 4 words
    assert "[DONE]" not in reply.events


def test_responses_reasoning_and_body(srv: FakeServerThread) -> None:
    body = {"model": "fake-model", "input": "a b", "stream": True, "fake": {"reasoning_tokens": 2}}
    events = post(f"{srv.base_url}/responses", body).events
    types = _types(events)
    assert types.count("response.reasoning_text.delta") == 2 and types[-1] == "response.completed"
    assert types.index("response.reasoning_text.delta") < types.index("response.output_text.delta")
    whole = post(f"{srv.base_url}/responses", {**body, "stream": False}).json()
    assert whole["object"] == "response" and whole["status"] == "completed"
    assert [o["type"] for o in whole["output"]] == ["reasoning", "message"]
    assert whole["output"][1]["content"][0]["text"] == token_text(2, 6)


def test_messages_stream_events(srv: FakeServerThread) -> None:
    body = {"model": "fake-model", "messages": USER, "system": "short", "max_tokens": 4, "stream": True}
    body["fake"] = {"reasoning_tokens": 1}
    reply = post(f"{srv.base_url}/messages", body)
    types = _types(reply.events)
    assert types[:3] == ["message_start", "ping", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    blocks = [e["content_block"]["type"] for e in reply.events if e["type"] == "content_block_start"]
    assert blocks == ["thinking", "text"]
    deltas = [e["delta"]["type"] for e in reply.events if e["type"] == "content_block_delta"]
    assert deltas == ["thinking_delta", "text_delta", "text_delta", "text_delta"]
    start, end = reply.events[0]["message"], reply.events[-2]
    assert start["usage"] == {"input_tokens": 5, "output_tokens": 1}
    assert end["delta"]["stop_reason"] == "max_tokens" and end["usage"] == {"output_tokens": 4}


def test_messages_require_max_tokens_and_take_x_api_key() -> None:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0.5, "output_tokens": 2, "api_key": "k-secret-1"}) as server:
        url = f"{server.base_url}/messages"
        body = {"model": "fake-model", "messages": USER, "max_tokens": 2}
        assert post(url, body).status == 401
        ok = post(url, body, {"x-api-key": "k-secret-1", "anthropic-version": "2023-06-01"})
        assert ok.status == 200 and ok.json()["content"][0]["text"] == token_text(0, 2)
        assert post(url, {"model": "fake-model", "messages": USER}, {"x-api-key": "k-secret-1"}).status == 400
        entry = server.log()[1]
        assert entry["auth_headers"] == ["anthropic-version", "x-api-key"]  # names only, never values
        assert "k-secret-1" not in str(server.log())


def test_embeddings_body_and_log(srv: FakeServerThread) -> None:
    body = {"model": "fake-model", "input": ["a b c", "d e"]}
    reply = post(f"{srv.base_url}/embeddings", body)
    answer = reply.json()
    assert answer["object"] == "list" and [d["index"] for d in answer["data"]] == [0, 1]
    assert all(len(d["embedding"]) == 8 for d in answer["data"])
    assert answer["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    entry = srv.log()[0]
    assert entry["inputs"] == 2 and entry["prompt_tokens"] == 5 and [c["kind"] for c in entry["chunks"]] == ["body"]
    assert post(f"{srv.base_url}/embeddings", {"model": "fake-model", "input": []}).status == 400


def test_rerank_shapes(srv: FakeServerThread) -> None:
    docs = ["one", "two words", "three more words"]
    cohere = post(f"{srv.base_url}/rerank", {"model": "fake-model", "query": "q", "documents": docs, "top_n": 2}).json()
    scores = [r["relevance_score"] for r in cohere["results"]]
    assert len(scores) == 2 and scores == sorted(scores, reverse=True)
    assert cohere["usage"]["prompt_tokens"] == 7
    tei = post(f"{srv.url}/rerank", {"query": "q", "texts": docs}).json()
    assert isinstance(tei, list) and sorted(r["index"] for r in tei) == [0, 1, 2]
    assert [e["inputs"] for e in srv.log()] == [3, 3]


def test_a_server_without_an_api_answers_404() -> None:
    with FakeServerThread({"ttft_ms": 1, "apis": ["chat", "embeddings"]}) as server:
        assert post(f"{server.base_url}/embeddings", {"model": "fake-model", "input": "x"}).status == 200
        for path in ("/v1/rerank", "/rerank", "/v1/messages", "/v1/responses"):
            reply = post(f"{server.url}{path}", {"model": "fake-model"})
            assert reply.status == 404 and reply.raw == b"404: Not Found", path
