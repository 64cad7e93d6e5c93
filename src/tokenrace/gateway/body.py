"""A client's request body, parsed once at admission: what the gateway reads of it, typed.

The gateway reads a handful of fields (the model, whether to stream, whether the client asked for
usage, the prompt's beginning for `prefix_affinity`) and passes everything else on untouched: a
backend gets the client's own bytes, or, when its model name differs or the gateway asks for usage,
the same object with those fields changed (`for_backend`).
"""

from __future__ import annotations

from typing import Any

import orjson


class BadBody(ValueError):
    """A body the gateway refuses before any backend (the message says why; `code` names it)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class RequestBody:
    """The JSON object a client sent: the fields the gateway acts on, and the object as it came."""

    __slots__ = ("_fields", "model", "stream", "stream_valid", "wants_usage")

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = fields  # the client's object as parsed: JSON, passed on, never read past here
        model = fields.get("model")
        self.model = model if isinstance(model, str) and model else None
        stream = fields.get("stream")
        self.stream = stream is True
        self.stream_valid = stream is None or isinstance(stream, bool)
        options = fields.get("stream_options")
        self.wants_usage = isinstance(options, dict) and options.get("include_usage") is True

    @classmethod
    def parse(cls, raw: bytes) -> RequestBody:
        """The body of a request (the server has already held its size and time to the limits)."""
        try:
            fields = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadBody(f"The body is not valid JSON: {exc}", "invalid_json") from None
        if not isinstance(fields, dict):
            raise BadBody("The body must be a JSON object.", "invalid_body")
        return cls(fields)

    def prompt_prefix(self, limit: int) -> str:
        """The prompt's first `limit` characters; for chat, up to the end of the first user message
        (role and text of each message). Empty when there is nothing to key on."""
        messages = self._fields.get("messages")
        if isinstance(messages, list):
            parts: list[str] = []
            size = 0
            for message in messages:
                if not isinstance(message, dict):
                    continue
                piece = f"{message.get('role')}\x00{_text_of(message.get('content'))}\x00"
                parts.append(piece)
                size += len(piece)
                if size >= limit or message.get("role") == "user":
                    break
            return "".join(parts)[:limit]
        prompt = self._fields.get("prompt")
        if isinstance(prompt, list) and prompt:
            prompt = prompt[0] if isinstance(prompt[0], str) else " ".join(map(str, prompt[:limit]))
        return prompt[:limit] if isinstance(prompt, str) else ""

    def messages(self) -> list[dict[str, str]] | None:
        """A chat request's messages as text: each one's string fields (role, name, ...) and its
        content (text parts joined); None for a request that is not a chat."""
        messages = self._fields.get("messages")
        if not isinstance(messages, list):
            return None
        return [
            {k: v for k, v in m.items() if isinstance(v, str)} | {"content": _text_of(m.get("content"))}
            for m in messages
            if isinstance(m, dict)
        ]

    def prompt(self) -> str | list[int] | None:
        """A completion's prompt: its text, or its token ids; None for anything else (several prompts)."""
        prompt = self._fields.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return prompt
        return None

    def for_backend(self, model: str, add_usage: bool) -> bytes:
        """The object with `model` set and, with `add_usage`, `stream_options.include_usage` on."""
        out = dict(self._fields)
        out["model"] = model
        if add_usage:
            options = out.get("stream_options")
            out["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return orjson.dumps(out)


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only the text ones say what the prefix is
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""
