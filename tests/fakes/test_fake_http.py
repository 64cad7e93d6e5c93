"""The fake server over HTTP: endpoints, OpenAI shapes, usage, overrides, auth, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from tokenrace import __version__
from tokenrace.fakes.fake_openai import count_tokens, token_text
from tokenrace.fakes.fake_server import FakeServerThread, serve

from .fake_helpers import QUICK, Reply, apost, chat, completion, get, post

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"


def chat_url(server: FakeServerThread) -> str:
    return f"{server.base_url}/chat/completions"


def completions_url(server: FakeServerThread) -> str:
    return f"{server.base_url}/completions"


def streamed_text(reply: Reply, field: str = "content") -> str:
    return "".join(c["choices"][0]["delta"].get(field) or "" for c in reply.chunks() if c["choices"])


def test_models_health_version(srv: FakeServerThread) -> None:
    models = get(f"{srv.base_url}/models").json()
    assert models == {
        "object": "list",
        "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}],
    }
    assert get(f"{srv.url}/health").json() == {"status": "ok"}
    assert get(f"{srv.url}/version").json() == {"version": f"fake-{__version__}"}


def test_tokenize_matches_count_tokens(srv: FakeServerThread) -> None:
    text = "the quick  brown\nfox"
    assert post(f"{srv.url}/tokenize", {"content": text}).json() == {"tokens": [0, 1, 2, 3]}
    assert count_tokens(text) == 4
    vllm_style = post(f"{srv.url}/tokenize", {"prompt": "a b c"}).json()
    assert vllm_style["count"] == 3 and vllm_style["tokens"] == [0, 1, 2]


def test_chat_stream_shapes(srv: FakeServerThread) -> None:
    reply = post(chat_url(srv), chat())
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    chunks = reply.chunks()
    role = chunks[0]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["choices"][0]["finish_reason"] is None
    for chunk in chunks:
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["id"] == role["id"] == reply.headers["x-request-id"]
        assert chunk["model"] == "fake-model" and isinstance(chunk["created"], int)
        assert chunk["choices"][0]["index"] == 0
    assert [c["choices"][0]["finish_reason"] for c in chunks[1:]] == [None] * 7 + ["stop"]
    assert streamed_text(reply) == token_text(0, 8)
    assert reply.events[-1] == "[DONE]"
    assert all("usage" not in c for c in chunks)  # auto, and the client did not ask


def test_usage_modes(srv: FakeServerThread) -> None:
    asked: dict[str, Any] = {"stream_options": {"include_usage": True}}
    last = post(chat_url(srv), chat(**asked)).chunks()[-1]
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 4, "completion_tokens": 8, "total_tokens": 12}
    always = post(chat_url(srv), chat(fake={"usage": "always"})).chunks()[-1]
    assert always["usage"]["completion_tokens"] == 8
    never = post(chat_url(srv), chat(fake={"usage": "never"}, **asked))
    assert all("usage" not in c for c in never.chunks())
    assert "usage" not in post(chat_url(srv), chat(False, fake={"usage": "never"})).json()


def test_chat_non_streaming(srv: FakeServerThread) -> None:
    body = post(chat_url(srv), chat(False)).json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": token_text(0, 8)}
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 8, "total_tokens": 12}


def test_completions_stream_and_body(srv: FakeServerThread) -> None:
    reply = post(completions_url(srv), completion(stream_options={"include_usage": True}))
    chunks = reply.chunks()
    assert all(c["object"] == "text_completion" for c in chunks)
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert "".join(texts) == token_text(0, 8) and len(texts) == 8  # no role chunk
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["prompt_tokens"] == 3
    body = post(completions_url(srv), completion(False, max_tokens=2)).json()
    assert body["object"] == "text_completion"
    assert body["choices"][0] == {
        "index": 0,
        "text": "w0 w1 ",
        "logprobs": None,
        "finish_reason": "length",
    }
    assert body["usage"]["completion_tokens"] == 2


def test_max_tokens_cuts_with_length(srv: FakeServerThread) -> None:
    reply = post(chat_url(srv), chat(max_tokens=3))
    assert streamed_text(reply) == "w0 w1 w2 "
    assert reply.content_chunks()[-1]["choices"][0]["finish_reason"] == "length"
    body = post(chat_url(srv), chat(False, max_completion_tokens=5, max_tokens=6)).json()
    assert body["usage"]["completion_tokens"] == 5
    # Exactly the natural length is a natural stop, not a cut.
    assert post(chat_url(srv), chat(False, max_tokens=8)).json()["choices"][0]["finish_reason"] == "stop"
    ignored = {"ignore_eos": True, "min_tokens": 2, "temperature": 0.7, "seed": 3}
    assert post(chat_url(srv), chat(False, **ignored)).status == 200


def test_tokens_per_chunk_grouping(srv: FakeServerThread) -> None:
    reply = post(chat_url(srv), chat(fake={"output_tokens": 10, "tokens_per_chunk": 3}))
    sizes = [count_tokens(c["choices"][0]["delta"]["content"]) for c in reply.content_chunks()]
    assert sizes == [3, 3, 3, 1]


def test_reasoning_tokens_come_first(srv: FakeServerThread) -> None:
    reply = post(chat_url(srv), chat(fake={"reasoning_tokens": 3}))
    deltas = [c["choices"][0]["delta"] for c in reply.content_chunks()]
    assert [next(iter(d)) for d in deltas] == ["reasoning_content"] * 3 + ["content"] * 5
    assert streamed_text(reply, "reasoning_content") == "w0 w1 w2 "
    message = post(chat_url(srv), chat(False, fake={"reasoning_tokens": 3})).json()["choices"][0]["message"]
    assert message["reasoning_content"] == "w0 w1 w2 " and message["content"] == token_text(3, 5)


def test_body_override_applies_to_one_request(srv: FakeServerThread) -> None:
    assert len(post(chat_url(srv), chat(fake={"output_tokens": 5})).content_chunks()) == 5
    assert len(post(chat_url(srv), chat()).content_chunks()) == 8
    bad = post(chat_url(srv), chat(fake={"output_tokenz": 5}))
    assert bad.status == 400 and bad.json()["error"]["type"] == "invalid_request_error"


def test_output_length_draws_are_seeded_per_request(srv: FakeServerThread) -> None:
    def lengths() -> list[int]:
        body = chat(False, fake={"output_tokens": 20, "output_tokens_std": 6, "seed": 7})
        return [post(chat_url(srv), body).json()["usage"]["completion_tokens"] for _ in range(6)]

    first = lengths()
    srv.reset()  # seq restarts, so the same requests draw the same lengths
    assert lengths() == first
    assert len(set(first)) > 1 and min(first) >= 1


def test_fault_every_counts_requests(srv: FakeServerThread) -> None:
    override = {"fault": "500", "fault_every": 2}
    statuses = [post(chat_url(srv), chat(False, fake=override)).status for _ in range(4)]
    assert statuses == [200, 500, 200, 500]
    never = {"fault": "500", "fault_rate": 0.0}
    assert {post(chat_url(srv), chat(False, fake=never)).status for _ in range(3)} == {200}


def test_errors_are_openai_shaped(srv: FakeServerThread) -> None:
    missing = post(chat_url(srv), {"model": "nope", "messages": []})
    assert missing.status == 404
    assert missing.json()["error"] == {
        "message": "The model `nope` does not exist.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
    broken = post(chat_url(srv), b"{not json")
    assert broken.status == 400 and "message" in broken.json()["error"]
    assert post(chat_url(srv), {"model": "fake-model"}).status == 400  # no messages
    assert post(completions_url(srv), {"model": "fake-model"}).status == 400  # no prompt
    assert post(chat_url(srv), chat(max_tokens=0)).status == 400
    assert get(f"{srv.url}/metrics").status == 404  # no metrics_text_path


def test_api_key_required() -> None:
    with FakeServerThread({**QUICK, "api_key": "sekrit"}) as server:
        denied = post(chat_url(server), chat())
        assert denied.status == 401
        assert denied.json()["error"]["code"] == "invalid_api_key"
        assert denied.json()["error"]["type"] == "invalid_request_error"
        assert get(f"{server.base_url}/models").status == 401
        wrong = post(chat_url(server), chat(), headers={"Authorization": "Bearer nope"})
        assert wrong.status == 401
        ok = post(chat_url(server), chat(), headers={"Authorization": "Bearer sekrit"})
        assert ok.status == 200 and ok.events[-1] == "[DONE]"
        assert get(f"{server.url}/health").status == 200  # only /v1 is guarded
        assert [e["status"] for e in server.log()] == [401, 401, 200]


def test_metrics_text_served() -> None:
    path = FIXTURES / "vllm.txt"
    with FakeServerThread({**QUICK, "metrics_text_path": str(path)}) as server:
        reply = get(f"{server.url}/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert reply.raw == path.read_bytes()


def test_thread_server_does_not_spin_unless_asked() -> None:
    assert FakeServerThread({}).config.spin_ms == 0
    assert FakeServerThread({"spin_ms": 0.5}).config.spin_ms == 0.5


def test_models_list_and_log_path(tmp_path: Path) -> None:
    log_path = tmp_path / "sent.jsonl"
    config = {**QUICK, "models": ["a", "b"], "log_path": str(log_path)}
    with FakeServerThread(config) as server:
        assert [m["id"] for m in get(f"{server.base_url}/models").json()["data"]] == ["a", "b"]
        assert post(chat_url(server), chat(model="b")).status == 200
        assert post(chat_url(server), {"messages": USER_ONLY}).status == 200  # model defaults to the first
        assert post(chat_url(server), chat()).status == 404  # fake-model is not served here
    lines = log_path.read_text().splitlines()
    assert len(lines) == 3 and '"model":"b"' in lines[0]


USER_ONLY = [{"role": "user", "content": "x"}]


def test_serve_in_callers_loop() -> None:
    """The embedding API a CLI uses: serve() with a ready callback and a stop event."""

    async def run() -> tuple[int, int]:
        stop = asyncio.Event()
        ready: asyncio.Queue[str] = asyncio.Queue()
        config = {**QUICK, "output_tokens": 3}
        task = asyncio.create_task(serve(config, "127.0.0.1", 0, ready.put_nowait, stop))
        url = await asyncio.wait_for(ready.get(), 10)
        async with aiohttp.ClientSession() as session:
            reply = await apost(session, f"{url}/v1/chat/completions", chat())
        stop.set()
        await asyncio.wait_for(task, 10)
        return reply.status, len(reply.content_chunks())

    assert asyncio.run(run()) == (200, 3)
