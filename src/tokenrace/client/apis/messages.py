"""Anthropic Messages API: POST `/messages`, authenticated by `x-api-key` and `anthropic-version`
(never `Authorization`).

The stream is typed events: `message_start` (the message id and the first usage), per content block
`content_block_start`, `content_block_delta` (`text_delta` is content, `thinking_delta` reasoning,
`input_json_delta` tool-call text) and `content_block_stop`, then `message_delta` (the stop reason and
the final usage) and `message_stop`, which ends a complete stream. `ping` keeps it alive; `error`
is a failure.

Anthropic's `input_tokens` counts only the prompt tokens that were neither read from nor written to
the prompt cache: the prompt is `input_tokens + cache_creation_input_tokens + cache_read_input_tokens`,
and `cache_read_input_tokens` are the cached tokens.
"""

from __future__ import annotations

from typing import Any

from tokenrace.client.apis.base import Api, body_object, count
from tokenrace.client.conversation import Content
from tokenrace.client.images import AnthropicPart, anthropic_part
from tokenrace.client.records import cached_tokens_of
from tokenrace.client.request import Prompt, RequestSpec
from tokenrace.client.stream import StreamReader
from tokenrace.model.records import RequestRecord, Usage

ANTHROPIC_VERSION = "2023-06-01"
# The API refuses a request without max_tokens; this is sent when the run sets none.
DEFAULT_MAX_TOKENS = 4096


def message_content(content: Content) -> str | list[AnthropicPart]:
    """A chat message's content as a Messages content value: image parts become `image` blocks with
    a base64 source (a `url` source for an http URL). Text parts already have Anthropic's shape."""
    if not isinstance(content, list):
        return content
    return [anthropic_part(p) for p in content]


def split_system(prompt: Prompt) -> tuple[str | None, list[dict[str, Any]]]:
    """(the top-level `system` text, the user and assistant messages): the Messages API takes no
    system role inside `messages`."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for m in prompt.as_messages():
        if m.get("role") in ("system", "developer"):
            content = m.get("content")
            system.append(content if isinstance(content, str) else _text_of(content))
        else:
            messages.append({**m, "content": message_content(m["content"])})
    return ("\n\n".join(system) if system else None), messages


def _text_of(content: Any) -> str:
    parts = content if isinstance(content, list) else []
    return " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


class MessagesApi(Api):
    name = "messages"
    path = "messages"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def fixed_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        o = spec.options
        system, messages = split_system(spec.prompt)
        max_tokens = spec.max_tokens
        b: dict[str, Any] = {
            "model": spec.model,
            "messages": messages,
            "max_tokens": max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS,
            "stream": o.stream,
        }
        if system is not None:
            b["system"] = system
        b.update(spec.sampling(seed=False))  # the Messages API takes no seed
        b.update(o.extra_body)
        return b

    def stream_reader(self, rec: RequestRecord) -> StreamReader:
        return MessagesReader(rec)

    def read_body(self, rec: RequestRecord, raw: Any) -> None:
        obj = body_object(rec, raw)
        if obj is None:
            return
        rec.response_id = rec.response_id or obj.get("id")
        answer, reasoning = [], []
        for block in obj.get("content") or []:
            if isinstance(block, dict):
                answer.append(block.get("text") or "")
                reasoning.append(block.get("thinking") or "")
        rec.text = "".join(reasoning) + "".join(answer)
        rec.finish_reason = obj.get("stop_reason")
        _set_usage(rec, obj.get("usage") or {})


class MessagesReader(StreamReader):
    __slots__ = ("usage",)
    end_mark = "message_stop"

    def __init__(self, rec: RequestRecord) -> None:
        super().__init__(rec)
        self.usage: dict[str, Any] = {}  # message_start's usage, updated by each message_delta

    def on_event(self, data: str, t: int) -> None:
        obj = self.event_object(data)
        if obj is None:
            return
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta") or {}
            if delta.get("type") == "text_delta":
                text = delta.get("text") or ""
                if text:
                    self.content(text, "", t)
            else:
                text = delta.get("thinking") or delta.get("partial_json") or ""
                if text:
                    self.content("", text, t)
        elif kind == "message_start":
            message = obj.get("message") or {}
            self.rec.response_id = self.rec.response_id or message.get("id")
            self._usage(message.get("usage"))
        elif kind == "message_delta":
            reason = (obj.get("delta") or {}).get("stop_reason")
            if reason:
                self.rec.finish_reason = reason
            self._usage(obj.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = obj.get("error") or {}
            self.rec.fail("stream_error", str(error.get("message") or error or obj)[:300])

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage.update({k: v for k, v in usage.items() if v is not None})
            _set_usage(self.rec, self.usage)


def _set_usage(rec: RequestRecord, usage: dict[str, Any]) -> None:
    rec.usage = usage_as_chat(usage)
    rec.cached_tokens, rec.cached_tokens_source = cached_tokens_of(rec.usage, None)


def usage_as_chat(usage: dict[str, Any]) -> Usage:
    """Messages usage in the chat shape the rest of tokenrace reads (`prompt_tokens`, ...)."""
    out: Usage = {}
    fresh = count(usage.get("input_tokens"))
    read = count(usage.get("cache_read_input_tokens"))
    written = count(usage.get("cache_creation_input_tokens"))
    if fresh is not None:
        out["prompt_tokens"] = fresh + (read or 0) + (written or 0)
    if read is not None:
        out["prompt_tokens_details"] = {"cached_tokens": read}
    if count(usage.get("output_tokens")) is not None:
        out["completion_tokens"] = usage["output_tokens"]
    return out
