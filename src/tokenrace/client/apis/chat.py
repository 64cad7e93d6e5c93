"""OpenAI Chat Completions (`/chat/completions`) and Completions (`/completions`).

The chat reader is the path every text benchmark takes: its per-event work is exactly what it was
before the other APIs existed (the client-accuracy benchmark holds it to that).
"""

from __future__ import annotations

from typing import Any

import orjson

from tokenrace.client.apis.base import Api, body_object
from tokenrace.client.conversation import ChatMessage
from tokenrace.client.records import cached_tokens_of
from tokenrace.client.request import Prompt, RequestSpec
from tokenrace.client.stream import StreamReader, error_message_from_body
from tokenrace.client.structured import response_format
from tokenrace.model.records import RequestRecord


def chat_messages(prompt: Prompt) -> list[ChatMessage]:
    """The request's `messages` (where image parts will join the text)."""
    return prompt.as_messages()


def _common(spec: RequestSpec, body: dict[str, Any]) -> dict[str, Any]:
    o = spec.options
    max_tokens = spec.max_tokens
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    body.update(spec.sampling())
    if o.stream and o.include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(o.extra_body)
    return body


class ChatApi(Api):
    name = "chat"
    path = "chat/completions"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        o = spec.options
        b = {"model": spec.model, "stream": o.stream, "messages": chat_messages(spec.prompt)}
        if o.tools is not None:
            b["tools"] = o.tools
            if o.tool_choice is not None:
                b["tool_choice"] = o.tool_choice
        if o.response_schema is not None:
            b["response_format"] = response_format(o.response_schema_name, o.response_schema)
        return _common(spec, b)

    def stream_reader(self, rec: RequestRecord) -> StreamReader:
        return ChatReader(rec, chat=True)

    def structured_reader(self, rec: RequestRecord) -> StreamReader:
        """The reader when tools or a schema were asked for: the plain one does no extra work per chunk."""
        return StructuredChatReader(rec)

    def structured_body(self, obj: Any) -> tuple[str, int]:
        """(the answer's text, the tool calls) of a whole body."""
        choices = obj.get("choices") if isinstance(obj, dict) else None
        msg = (choices[0] if choices else {}).get("message") or {}
        return str(msg.get("content") or ""), len(msg.get("tool_calls") or [])

    def read_body(self, rec: RequestRecord, obj: Any) -> None:
        read_choice_body(rec, obj)

    def not_found_hint(self, url: str) -> str | None:
        return None  # a 404 here is most often an unknown model: the preflight names the models


class CompletionsApi(ChatApi):
    name = "completions"
    path = "completions"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        b = {"model": spec.model, "stream": spec.options.stream, "prompt": spec.prompt.as_text()}
        return _common(spec, b)

    def stream_reader(self, rec: RequestRecord) -> StreamReader:
        return ChatReader(rec, chat=False)

    def structured_reader(self, rec: RequestRecord) -> StreamReader:
        raise NotImplementedError("the completions API takes no tools and no response format")


class ChatReader(StreamReader):
    """Chat and completions chunks: `choices[0].delta` (chat) or `choices[0].text`, then usage."""

    __slots__ = ("chat",)

    def __init__(self, rec: RequestRecord, chat: bool) -> None:
        super().__init__(rec)
        self.chat = chat

    def on_event(self, data: str, t: int) -> None:
        if data == "[DONE]":
            self.done = True
            return
        rec = self.rec
        # Inline, not through event_object(): this runs once per chunk of every chat benchmark.
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            rec.fail("malformed_sse", f"unparseable SSE data: {data[:120]!r}")
            return
        if not isinstance(obj, dict):
            rec.fail("malformed_sse", f"SSE data is not an object: {data[:120]!r}")
            return
        if not self.chunk_ns and rec.response_id is None:  # read until the first content chunk
            rec.response_id = obj.get("id")
        choices = obj.get("choices")
        if choices:
            self._on_choice(choices[0], t)
        usage = obj.get("usage")
        if usage:
            rec.usage = usage
        timings = obj.get("timings")
        if timings:
            rec.server_timing = timings
        if usage or timings:
            rec.cached_tokens, rec.cached_tokens_source = cached_tokens_of(rec.usage, rec.server_timing)
        if "error" in obj:
            rec.fail("stream_error", str(error_message_from_body(data.encode())))

    def _on_choice(self, choice: dict[str, Any], t: int) -> None:
        # StreamReader.content() inlined, for the same reason as the parse above.
        answer, reasoning = _content_of(choice, self.chat)
        if answer or reasoning:
            chunk_ns = self.chunk_ns
            if not chunk_ns:
                self.first_token(t)
            if answer and not self.answered:
                self.answered = True
                self.rec.first_answer_ns = t
            chunk_ns.append(t)
            self.chunk_chars.append(len(answer) + len(reasoning))
            self.pieces.append(reasoning + answer)
            if reasoning and not answer:
                self.reasoning += 1
        reason = choice.get("finish_reason")
        if reason:
            self.rec.finish_reason = reason
            self.rec.finishes = (self.rec.finishes or 0) + 1  # more than one: a server that ends twice (TEST06)


class StructuredChatReader(ChatReader):
    """A chat stream that may carry tool calls: their deltas (name, arguments) are output chunks and
    tokens, stamped as the first tool delta; the answer's text is kept apart for schema validation."""

    __slots__ = ("answer", "calls")

    def __init__(self, rec: RequestRecord) -> None:
        super().__init__(rec, chat=True)
        self.answer: list[str] = []
        self.calls: set[Any] = set()

    def _on_choice(self, choice: dict[str, Any], t: int) -> None:
        rec = self.rec
        delta = choice.get("delta") or {}
        answer = delta.get("content") or ""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        tool = self._tool_text(delta.get("tool_calls"))
        if answer or reasoning or tool:
            chunk_ns = self.chunk_ns
            if not chunk_ns:
                self.first_token(t)
            if answer and not self.answered:
                self.answered = True
                rec.first_answer_ns = t
            if tool and rec.first_tool_ns is None:
                rec.first_tool_ns = t
            chunk_ns.append(t)
            self.chunk_chars.append(len(answer) + len(reasoning) + len(tool))
            self.pieces.append(reasoning + answer + tool)
            self.answer.append(answer)
            if reasoning and not answer and not tool:
                self.reasoning += 1
        reason = choice.get("finish_reason")
        if reason:
            rec.finish_reason = reason
            rec.finishes = (rec.finishes or 0) + 1  # more than one: a server that ends twice (TEST06)

    def _tool_text(self, calls: Any) -> str:
        """The generated text of a delta's tool calls (function names and argument pieces)."""
        if not calls:
            return ""
        text = ""
        for call in calls:
            self.calls.add(call.get("index", call.get("id", len(self.calls))))
            fn = call.get("function") or {}
            text += (fn.get("name") or "") + (fn.get("arguments") or "")
        return text

    def structured(self) -> tuple[str, int]:
        """(the answer's text, the tool calls) read so far."""
        return "".join(self.answer), len(self.calls)


def _content_of(choice: dict[str, Any], chat: bool) -> tuple[str, str]:
    """(answer text, reasoning/tool text) carried by one streamed choice."""
    if not chat:
        return choice.get("text") or "", ""
    delta = choice.get("delta") or {}
    answer = delta.get("content") or ""
    reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
    tools = delta.get("tool_calls")
    if tools:
        for call in tools:
            fn = call.get("function") or {}
            reasoning += fn.get("arguments") or fn.get("name") or ""
    return answer, reasoning


def read_choice_body(rec: RequestRecord, raw: Any) -> None:
    """A whole chat.completion or text_completion body."""
    obj = body_object(rec, raw)
    if obj is None:
        return
    rec.response_id = rec.response_id or obj.get("id")
    rec.usage = obj.get("usage")
    rec.server_timing = obj.get("timings")
    rec.cached_tokens, rec.cached_tokens_source = cached_tokens_of(rec.usage, rec.server_timing)
    choices = obj.get("choices") or [{}]
    choice = choices[0]
    msg = choice.get("message") or {}
    answer = msg.get("content") or choice.get("text") or ""
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
    calls = msg.get("tool_calls") or []
    tools = "".join(str((c.get("function") or {}).get("arguments") or "") for c in calls if isinstance(c, dict))
    rec.text = reasoning + answer + tools
    rec.finish_reason = choice.get("finish_reason")
