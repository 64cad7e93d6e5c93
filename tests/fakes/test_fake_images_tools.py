"""The fake server's images (decoded in every API's shape, logged, refused on demand), its tool-call
deltas and its programmed answers."""

from __future__ import annotations

import base64
import io

import orjson
from PIL import Image

from tokenrace.fakes.fake_images import received_images
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.fakes.fake_tools import argument_pieces, call_sizes

from .fake_helpers import chat, post


def _png(size: tuple[int, int], fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, "blue").save(buf, fmt)
    return base64.b64encode(buf.getvalue()).decode()


def _image_message(b64: str, mime: str = "image/png") -> list[dict[str, object]]:
    url = f"data:{mime};base64,{b64}"
    content = [{"type": "text", "text": "what is it"}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": content}]


def test_images_in_all_three_shapes_are_decoded() -> None:
    png, jpeg = _png((4, 3)), _png((5, 2), "JPEG")
    body = {
        "messages": _image_message(png),
        "input": [
            {"role": "user", "content": [{"type": "input_image", "image_url": f"data:image/jpeg;base64,{jpeg}"}]},
            {
                "role": "user",
                "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}],
            },
        ],
    }
    got = received_images(body)
    assert [(i.format, i.width, i.height) for i in got] == [("PNG", 4, 3), ("JPEG", 5, 2), ("PNG", 4, 3)]
    assert got[0].sha256 == got[2].sha256 != got[1].sha256


def test_a_request_image_is_logged_and_delays_the_first_token(srv: FakeServerThread) -> None:
    plain = post(f"{srv.base_url}/chat/completions", chat(fake={"ttft_ms": 5}))
    with_image = post(
        f"{srv.base_url}/chat/completions",
        chat(messages=_image_message(_png((7, 9))), fake={"ttft_ms": 5, "image_ms": 80}),
    )
    assert plain.status == with_image.status == 200
    log = srv.log()
    assert log[0]["images"] is None
    assert log[1]["images"][0]["width"] == 7 and log[1]["images"][0]["height"] == 9
    first = [c for c in log[1]["chunks"] if c["kind"] == "content"][0]
    assert (first["t_ns"] - log[1]["arrival_ns"]) / 1e6 >= 80  # 5 ms + 80 ms for the one image


def test_bad_and_refused_images_are_400s(srv: FakeServerThread) -> None:
    url = f"{srv.base_url}/chat/completions"
    broken = post(url, chat(messages=_image_message(base64.b64encode(b"not an image").decode())))
    assert broken.status == 400 and "Cannot identify image" in broken.json()["error"]["message"]
    remote = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]
    assert post(url, chat(messages=remote)).status == 400
    refused = post(url, chat(messages=_image_message(_png((2, 2))), fake={"refuse_images": True}))
    assert refused.status == 400 and "does not support image input" in refused.json()["error"]["message"]


def test_tool_call_deltas_rebuild_valid_arguments(srv: FakeServerThread) -> None:
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    reply = post(f"{srv.base_url}/chat/completions", chat(tools=tools, fake={"tool_calls": 2, "output_tokens": 5}))
    calls: dict[int, str] = {}
    names = set()
    for chunk in reply.chunks():
        for call in (chunk["choices"][0]["delta"].get("tool_calls") or []) if chunk["choices"] else []:
            calls[call["index"]] = calls.get(call["index"], "") + call["function"]["arguments"]
            names.add(call["function"].get("name"))
    assert [orjson.loads(a)["q"] for a in calls.values()] == ["w0 w1 w2 ", "w3 w4 "]
    assert names == {"lookup", None}
    last = [c for c in reply.chunks() if c["choices"]][-1]
    assert last["choices"][0]["finish_reason"] == "tool_calls"
    assert call_sizes(2, 5) == [1, 1] and argument_pieces(0, 1) == ['{"q": "w0 "}']
    text = post(f"{srv.base_url}/chat/completions", chat(fake={"tool_calls": 2}))  # no tools offered: text
    assert all(not c["choices"] or "tool_calls" not in c["choices"][0]["delta"] for c in text.chunks())


def test_a_programmed_answer_is_streamed_word_by_word(srv: FakeServerThread) -> None:
    reply = post(f"{srv.base_url}/chat/completions", chat(fake={"answer": '{"a": 1, "b": [2, 3]}'}))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in reply.chunks() if c["choices"])
    assert orjson.loads(text) == {"a": 1, "b": [2, 3]}
    usage = [c for c in reply.chunks() if c.get("usage")]
    assert not usage or usage[0]["usage"]["completion_tokens"] == 4
    body = post(f"{srv.base_url}/chat/completions", chat(stream=False, fake={"answer": "[1, 2]"})).json()
    assert orjson.loads(body["choices"][0]["message"]["content"]) == [1, 2]
