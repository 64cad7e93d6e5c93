"""OpenAI wire shapes for the fake server: the toy tokenizer, chunks, bodies, errors.

Everything here is pure (no I/O), so the exact bytes the server sends can be
tested without a socket.

The toy tokenizer: one token is one whitespace-separated word. Generated token
i is the word `"w{i} "`, so any generated text re-tokenizes to its token count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import orjson

Endpoint: TypeAlias = Literal["chat", "completions", "responses", "messages"]
Json: TypeAlias = dict[str, Any]

DONE_EVENT = b"data: [DONE]\n\n"
MALFORMED_EVENT = b"data: {not json\n\n"


def count_tokens(text: str) -> int:
    """The fake server's tokenizer: the number of whitespace-separated words."""
    return len(text.split())


def token_text(start: int, count: int) -> str:
    """The text of generated tokens start .. start+count-1."""
    return "".join(f"w{i} " for i in range(start, start + count))


def _content_text(content: Any) -> str:
    """Text of one chat message content: a string, or a list of typed parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


def chat_prompt_text(messages: list[Any]) -> str:
    """The text a chat request's prompt is made of: all message contents joined by a space."""
    return " ".join(_content_text(m.get("content")) for m in messages if isinstance(m, Mapping))


def chat_prompt_tokens(messages: list[Any]) -> int:
    """Prompt tokens of a chat request: all message contents joined by a space."""
    return count_tokens(chat_prompt_text(messages))


def responses_prompt_text(body: Mapping[str, Any]) -> str:
    """A Responses request's prompt: `instructions`, then `input` (a string or message items)."""
    items = body.get("input")
    text = items if isinstance(items, str) else chat_prompt_text(items if isinstance(items, list) else [])
    instructions = body.get("instructions")
    return f"{instructions} {text}" if isinstance(instructions, str) else text


def messages_prompt_text(body: Mapping[str, Any]) -> str:
    """A Messages request's prompt: the top-level `system` (a string or text blocks), then `messages`."""
    system = body.get("system")
    head = system if isinstance(system, str) else _content_text(system)
    messages = body.get("messages")
    text = chat_prompt_text(messages if isinstance(messages, list) else [])
    return f"{head} {text}" if head else text


def completion_prompt_text(prompt: Any) -> str:
    """The text of a completions prompt for the prefix cache: texts joined, token ids as words."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return " ".join(_one_prompt_text(p) for p in prompt)
    return ""


def _one_prompt_text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, int):
        return str(item)
    if isinstance(item, list):
        return " ".join(str(i) for i in item)
    return ""


def completion_prompt_tokens(prompt: Any) -> int:
    """Prompt tokens of a completions request: text, list of texts, or token ids."""
    if isinstance(prompt, str):
        return count_tokens(prompt)
    if isinstance(prompt, list):
        return sum(_one_prompt_tokens(p) for p in prompt)
    return 0


def _one_prompt_tokens(item: Any) -> int:
    if isinstance(item, str):
        return count_tokens(item)
    if isinstance(item, int):
        return 1
    if isinstance(item, list):
        return len(item)
    return 0


@dataclass(frozen=True)
class ResponseMeta:
    """The fields every chunk and body of one response shares."""

    id: str
    created: int
    model: str
    endpoint: Endpoint

    def _head(self, object_name: str) -> Json:
        return {"id": self.id, "object": object_name, "created": self.created, "model": self.model}

    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.endpoint == "chat" else "text_completion"


def sse(obj: Json) -> bytes:
    """One server-sent event: `data: <json>` and a blank line."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def role_chunk(meta: ResponseMeta) -> Json:
    """The first chat chunk vLLM/OpenAI send: the role, no content yet."""
    return delta_chunk(meta, {"role": "assistant", "content": ""}, None)


def delta_chunk(meta: ResponseMeta, delta: Json, finish_reason: str | None) -> Json:
    """A streaming chat chunk with the given delta."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {**meta._head(meta.chunk_object()), "choices": [choice]}


def text_chunk(meta: ResponseMeta, text: str, finish_reason: str | None) -> Json:
    """A streaming completions chunk."""
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return {**meta._head(meta.chunk_object()), "choices": [choice]}


def usage_block(
    prompt_tokens: int, completion_tokens: int, reasoning_tokens: int, cached_tokens: int | None = None
) -> Json:
    usage: Json = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        # OpenAI's shape, also vLLM's (--enable-prompt-tokens-details) and SGLang's.
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


def engine_timings(
    cached_tokens: int | None, prompt_tokens: int, prompt_ms: float, output_tokens: int, itl_ms: float
) -> Json:
    """llama.cpp's per-response `timings`: prompt_n counts the tokens prefilled, cache_n those reused."""
    cache_n = cached_tokens or 0
    prompt_n = prompt_tokens - cache_n
    predicted_ms = itl_ms * max(output_tokens - 1, 0)
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else None,
        "predicted_n": output_tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / (output_tokens - 1) if output_tokens > 1 else None,
    }


def usage_chunk(meta: ResponseMeta, usage: Json) -> Json:
    """The final usage chunk of a stream: no choices, only usage."""
    return {**meta._head(meta.chunk_object()), "choices": [], "usage": usage}


def chat_body(meta: ResponseMeta, reasoning: str, content: str, finish_reason: str, usage: Json | None) -> Json:
    """A non-streaming chat.completion body."""
    message: Json = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
    return _with_usage({**meta._head("chat.completion"), "choices": [choice]}, usage)


def completion_body(meta: ResponseMeta, text: str, finish_reason: str, usage: Json | None) -> Json:
    """A non-streaming text_completion body."""
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return _with_usage({**meta._head("text_completion"), "choices": [choice]}, usage)


def _with_usage(body: Json, usage: Json | None) -> Json:
    if usage is not None:
        body["usage"] = usage
    return body


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> Json:
    """OpenAI's error envelope."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
