"""The bytes of a streamed answer in each API's shape: chat and completions chunks, Responses API
events, Anthropic Messages events. Pure (no I/O).

A `Wire` says what opens a stream, what one group of tokens looks like, and what closes it;
`fake_plan.plan_stream` decides when each is sent. The timing of token groups is the same whatever
the wire, so one programmed schedule measures every API alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from tokenrace.fakes.fake_log import ChunkKind
from tokenrace.fakes.fake_openai import (
    DONE_EVENT,
    Json,
    ResponseMeta,
    chat_body,
    completion_body,
    delta_chunk,
    role_chunk,
    sse,
    text_chunk,
    usage_chunk,
)

if TYPE_CHECKING:
    from tokenrace.fakes.fake_plan import GenRequest

Piece = tuple[ChunkKind, bytes]  # (what the send log calls it, the bytes)


def named_sse(obj: Json) -> bytes:
    """An event with its name line, as the Responses and Messages APIs send them."""
    return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


class Wire:
    def opening(self, req: GenRequest) -> list[Piece]:
        return []

    def token(self, req: GenRequest, kind: ChunkKind, first: int, text: str, is_last: bool) -> bytes:
        raise NotImplementedError

    def closing(self, req: GenRequest) -> list[Piece]:
        return []

    def body(self, req: GenRequest, reasoning: str, answer: str, usage: Json | None) -> Json:
        raise NotImplementedError


class ChatWire(Wire):
    """Chat completions (and completions, which have no role chunk and carry `text`)."""

    def opening(self, req: GenRequest) -> list[Piece]:
        if req.meta.endpoint == "chat" and req.config.role_chunk:
            return [("role", sse(role_chunk(req.meta)))]
        return []

    def token(self, req: GenRequest, kind: ChunkKind, first: int, text: str, is_last: bool) -> bytes:
        finish = req.finish_reason if is_last else None
        if req.meta.endpoint == "completions":
            chunk = text_chunk(req.meta, text, finish)
        else:
            field = "reasoning_content" if kind == "reasoning" else "content"
            chunk = delta_chunk(req.meta, {field: text}, finish)
        timings = req.timings() if is_last else None
        if timings is not None:
            chunk["timings"] = timings  # llama.cpp puts them on the chunk that carries finish_reason
        return sse(chunk)

    def closing(self, req: GenRequest) -> list[Piece]:
        usage: list[Piece] = [("usage", sse(usage_chunk(req.meta, req.usage())))] if req.include_usage else []
        return [*self._extra_finishes(req), *usage, ("done", DONE_EVENT)]

    def _extra_finishes(self, req: GenRequest) -> list[Piece]:
        """Events repeating the finish_reason after the last token's (`finishes` > 1: a misbehaving
        server), each with no text."""
        extra = req.config.finishes - 1
        if extra <= 0:
            return []
        if req.meta.endpoint == "completions":
            chunk = text_chunk(req.meta, "", req.finish_reason)
        else:
            chunk = delta_chunk(req.meta, {}, req.finish_reason)
        return [("done", sse(chunk))] * extra

    def body(self, req: GenRequest, reasoning: str, answer: str, usage: Json | None) -> Json:
        if req.meta.endpoint == "chat":
            return chat_body(req.meta, reasoning, answer, req.finish_reason, usage)
        return completion_body(req.meta, answer, req.finish_reason, usage)


# --- OpenAI Responses API -----------------------------------------------------------------------


def responses_object(req: GenRequest, status: str, output: list[Json], usage: Json | None) -> Json:
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": req.meta.id,
        "object": "response",
        "created_at": req.meta.created,
        "status": status,
        "model": req.meta.model,
        "output": output,
        "incomplete_details": incomplete,
        "usage": usage,
    }


def responses_usage(req: GenRequest) -> Json | None:
    if not req.include_usage:
        return None
    usage: Json = {
        "input_tokens": req.prompt_tokens,
        "output_tokens": req.output_tokens,
        "total_tokens": req.prompt_tokens + req.output_tokens,
        "output_tokens_details": {"reasoning_tokens": req.reasoning_tokens},
    }
    if req.cached_tokens is not None:
        usage["input_tokens_details"] = {"cached_tokens": req.cached_tokens}
    return usage


def _responses_items(req: GenRequest, reasoning: str, answer: str) -> list[Json]:
    items: list[Json] = []
    if reasoning:
        items.append({"id": f"rs_{req.meta.id}", "type": "reasoning", "summary": [], "content": [_part(reasoning)]})
    message = {"id": f"msg_{req.meta.id}", "type": "message", "role": "assistant", "status": "completed"}
    items.append({**message, "content": [{"type": "output_text", "text": answer, "annotations": []}]})
    return items


def _part(text: str) -> Json:
    return {"type": "reasoning_text", "text": text}


class ResponsesWire(Wire):
    def opening(self, req: GenRequest) -> list[Piece]:
        response = responses_object(req, "in_progress", [], None)
        created = named_sse({"type": "response.created", "response": response})
        return [("role", created + named_sse({"type": "response.in_progress", "response": response}))]

    def token(self, req: GenRequest, kind: ChunkKind, first: int, text: str, is_last: bool) -> bytes:
        out = b""
        if kind == "reasoning":
            if first == 0:
                item = {"id": f"rs_{req.meta.id}", "type": "reasoning", "summary": []}
                out += named_sse({"type": "response.output_item.added", "output_index": 0, "item": item})
            delta = {"type": "response.reasoning_text.delta", "item_id": f"rs_{req.meta.id}", "output_index": 0}
            return out + named_sse({**delta, "content_index": 0, "delta": text})
        index = 1 if req.reasoning_tokens else 0
        item_id = f"msg_{req.meta.id}"
        if first == req.reasoning_tokens:
            item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            out += named_sse({"type": "response.output_item.added", "output_index": index, "item": item})
            part = {"type": "output_text", "text": "", "annotations": []}
            added = {"type": "response.content_part.added", "item_id": item_id, "output_index": index}
            out += named_sse({**added, "content_index": 0, "part": part})
        delta = {"type": "response.output_text.delta", "item_id": item_id, "output_index": index}
        return out + named_sse({**delta, "content_index": 0, "delta": text})

    def closing(self, req: GenRequest) -> list[Piece]:
        reasoning, answer = req.texts()
        status = "incomplete" if req.finish_reason == "length" else "completed"
        output = _responses_items(req, reasoning, answer)
        done = {"type": "response.output_text.done", "item_id": f"msg_{req.meta.id}", "text": answer}
        final = responses_object(req, status, output, responses_usage(req))
        end = named_sse(done) + named_sse({"type": f"response.{status}", "response": final})
        return [("done", end)]

    def body(self, req: GenRequest, reasoning: str, answer: str, usage: Json | None) -> Json:
        status = "incomplete" if req.finish_reason == "length" else "completed"
        return responses_object(req, status, _responses_items(req, reasoning, answer), responses_usage(req))


# --- Anthropic Messages API ---------------------------------------------------------------------

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def messages_usage(req: GenRequest, output_tokens: int) -> Json:
    """Anthropic's usage: `input_tokens` leaves out what the cache served (`cache_read_input_tokens`)."""
    cached = req.cached_tokens
    usage: Json = {"input_tokens": req.prompt_tokens - (cached or 0), "output_tokens": output_tokens}
    if cached is not None:
        usage["cache_read_input_tokens"] = cached
        usage["cache_creation_input_tokens"] = 0
    return usage


def _message(req: GenRequest, content: list[Json], stop: str | None, usage: Json | None) -> Json:
    message: Json = {"id": req.meta.id, "type": "message", "role": "assistant", "model": req.meta.model}
    message.update({"content": content, "stop_reason": stop, "stop_sequence": None})
    if usage is not None:
        message["usage"] = usage
    return message


class MessagesWire(Wire):
    def opening(self, req: GenRequest) -> list[Piece]:
        usage = messages_usage(req, 1) if req.include_usage else None
        start = named_sse({"type": "message_start", "message": _message(req, [], None, usage)})
        return [("role", start + named_sse({"type": "ping"}))]

    def token(self, req: GenRequest, kind: ChunkKind, first: int, text: str, is_last: bool) -> bytes:
        out = b""
        thinking = kind == "reasoning"
        index = 0 if thinking or not req.reasoning_tokens else 1
        if thinking and first == 0:
            block: Json = {"type": "thinking", "thinking": ""}
            out += named_sse({"type": "content_block_start", "index": 0, "content_block": block})
        elif not thinking and first == req.reasoning_tokens:
            if req.reasoning_tokens:
                out += named_sse({"type": "content_block_stop", "index": 0})
            block = {"type": "text", "text": ""}
            out += named_sse({"type": "content_block_start", "index": index, "content_block": block})
        delta = {"type": "thinking_delta", "thinking": text} if thinking else {"type": "text_delta", "text": text}
        return out + named_sse({"type": "content_block_delta", "index": index, "delta": delta})

    def closing(self, req: GenRequest) -> list[Piece]:
        index = 1 if req.reasoning_tokens else 0
        stop = named_sse({"type": "content_block_stop", "index": index})
        delta: Json = {"type": "message_delta", "delta": {"stop_reason": _stop(req), "stop_sequence": None}}
        if req.include_usage:
            delta["usage"] = {"output_tokens": req.output_tokens}
        return [("usage", stop + named_sse(delta)), ("done", named_sse({"type": "message_stop"}))]

    def body(self, req: GenRequest, reasoning: str, answer: str, usage: Json | None) -> Json:
        content: list[Json] = [{"type": "thinking", "thinking": reasoning}] if reasoning else []
        content.append({"type": "text", "text": answer})
        totals = messages_usage(req, req.output_tokens) if req.include_usage else None
        return _message(req, content, _stop(req), totals)


def _stop(req: GenRequest) -> str:
    return STOP_REASONS.get(req.finish_reason, req.finish_reason)


WIRES: dict[str, Wire] = {
    "chat": ChatWire(),
    "completions": ChatWire(),
    "responses": ResponsesWire(),
    "messages": MessagesWire(),
}


def wire_for(meta: ResponseMeta) -> Wire:
    return WIRES[meta.endpoint]


__all__ = ["WIRES", "Wire", "named_sse", "responses_object", "responses_usage", "wire_for"]
