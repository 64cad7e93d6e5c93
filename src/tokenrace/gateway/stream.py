"""What the gateway sees in a stream it passes through, and the error event it ends a broken one with.

`StreamTap.feed(chunk, now_ns)` returns the bytes to forward now and, on the side, notes what the
events say: first and last token times, tokens, usage, `[DONE]`, the response id. It is pure (no
I/O) so every rule is tested without a socket.

The forwarding rule: each upstream read is forwarded as soon as it arrives, cut at the end of its
last complete SSE event. Reads that are whole `data:` events (what OpenAI-compatible servers send)
take a fast path of C-level byte splits; anything else goes through the general `SSEParser`. Bytes of an event that is not complete yet wait for the rest of it (a
client cannot act on half an event anyway); keep-alive comment lines go out at once. Because the
client never holds half an event, a stream that breaks can always be closed with a clean error
event (see `error_event`).
"""

from __future__ import annotations

import time
from typing import Literal, NamedTuple, TypeAlias, TypedDict

import orjson
from orjson import JSONDecodeError, loads

from tokenrace.client.sse import SSEParser

Endpoint: TypeAlias = Literal["chat", "completions"]
DONE = b"data: [DONE]\n\n"
_TEXT_KEYS = tuple((k, len(k)) for k in (b'"content":"', b'"reasoning_content":"', b'"reasoning":"', b'"text":"'))


class Usage(NamedTuple):
    """The token counts of a backend's `usage` object (None: a count it did not give as an integer).
    A named tuple: one is made per response, on the request path."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None

    @classmethod
    def of(cls, usage: object) -> Usage | None:
        """The counts of a parsed `usage` value; None when it is not an object."""
        if type(usage) is not dict:
            return None
        prompt, completion, total = (
            usage.get("prompt_tokens"),
            usage.get("completion_tokens"),
            usage.get("total_tokens"),
        )
        return cls(
            prompt if isinstance(prompt, int) else None,
            completion if isinstance(completion, int) else None,
            total if isinstance(total, int) else None,
        )


class StreamTap:
    __slots__ = (
        "endpoint",
        "strip_usage",
        "keep_text",
        "parser",
        "_held",
        "_offset",
        "done",
        "first_token_ns",
        "last_token_ns",
        "content_chunks",
        "usage",
        "finish_reason",
        "response_id",
        "model",
        "created",
        "malformed",
        "upstream_error",
        "pieces",
        "_fast",
        "_parser_base",
    )

    def __init__(self, endpoint: Endpoint, strip_usage: bool = False, keep_text: bool = False) -> None:
        self.endpoint = endpoint
        self.strip_usage = strip_usage  # the gateway asked for usage; the client did not
        self.keep_text = keep_text  # shadow comparisons need the text
        self.parser = SSEParser()
        self._held = b""  # bytes after the last complete event, not forwarded yet
        self._offset = 0  # stream offset of the first held byte
        self.done = False
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.content_chunks = 0
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.malformed = 0
        self.upstream_error: str | None = None
        self.pieces: list[str] = []
        self._fast = True  # while every read is whole `data:` events, skip the general parser
        self._parser_base = 0  # stream offset at which the parser started (it counts from 0)

    def feed(self, chunk: bytes, now_ns: int) -> bytes:
        """Take one upstream read; return what to forward to the client now."""
        if self._fast and not self._held:
            out = self._feed_fast(chunk, now_ns)
            if out is not None:
                return out
            self._fast = False  # unusual framing: the general parser takes over for good
            self._parser_base = self._offset
        return self._feed_parsed(chunk, now_ns)

    def _feed_fast(self, chunk: bytes, now_ns: int) -> bytes | None:
        """The common case, in C-speed byte operations: the read is whole `data: ...` events.

        Returns None (having changed nothing) when the read is anything else: a partial event,
        CR line ends, comments, multi-line data, event or id fields.
        """
        # `find`, not `in`: in CPython 3.11 `bytes in bytes` first tries the operand as an integer
        # and builds (then drops) a TypeError each time, which costs more than the search.
        if not chunk.endswith(b"\n\n") or chunk.find(b"\r") >= 0:
            return None
        if chunk.find(b"\n", 0, len(chunk) - 2) < 0:  # one event (what backends write): no split, no list
            if not chunk.startswith(b"data:"):
                return None
            self._offset += len(chunk)
            # The skim reads the whole event: "data:" and the blank line hold no quote to match.
            if self.response_id is not None and not self.keep_text and self._skim(chunk, now_ns):
                return chunk
            data = chunk[6:-2] if chunk[5:6] == b" " else chunk[5:-2]
            if self._inspect(data, now_ns) and self.strip_usage:
                return b""
            return chunk
        parts = chunk[:-2].split(b"\n\n")
        for part in parts:
            if part[:5] != b"data:" or part.find(b"\n") >= 0:
                return None
        self._offset += len(chunk)
        strip = -1
        for i, part in enumerate(parts):
            data = part[6:] if part[5:6] == b" " else part[5:]
            if self._inspect(data, now_ns) and self.strip_usage:
                strip = i
        if strip < 0:
            return chunk
        return b"".join(p + b"\n\n" for i, p in enumerate(parts) if i != strip)

    def _skim(self, data: bytes, now_ns: int) -> bool:
        """Count a plain mid-stream delta from its bytes alone; False: not sure, parse it.

        Most events are one choice with `"finish_reason":null` and no usage object or error; all
        they can tell is whether they carry text, and the bytes say so: `"content":"` (or
        `"reasoning_content":"`, `"reasoning":"`, `"text":"`) followed by anything but the closing
        quote. Quotes inside JSON strings are escaped, so these patterns cannot match inside text.
        The first event (it has the id), the last (a finish reason), usage, errors, several choices,
        other spacing, and streams whose text is kept all take the full parse. The tests hold this
        against the full parse on random texts.
        The caller checks first that the stream's first event was parsed and no text is kept.
        """
        if data.count(b'"finish_reason"') != 1 or data.find(b'"finish_reason":null') < 0:
            return False
        if data.find(b'"usage":{') >= 0 or data.find(b'"error"') >= 0:
            return False
        for key, after in _TEXT_KEYS:
            at = data.find(key)
            if at >= 0 and data[after + at : after + at + 1] != b'"':
                if self.first_token_ns is None:
                    self.first_token_ns = now_ns
                self.last_token_ns = now_ns
                self.content_chunks += 1
                return True
        return True

    def _feed_parsed(self, chunk: bytes, now_ns: int) -> bytes:
        """Any framing: the incremental SSE parser finds where events end."""
        events = self.parser.feed(chunk)
        held = self._held + chunk if self._held else chunk
        base = self._offset
        if not events:
            return self._comments_only(held, base)
        drop: list[tuple[int, int]] = []
        prev_end = base
        for ev in events:
            end = ev.end + self._parser_base
            if self._inspect(ev.data, now_ns) and self.strip_usage:
                drop.append((prev_end - base, end - base))
            prev_end = end
        last = events[-1].end + self._parser_base
        cut = last - base
        out = held if cut == len(held) else held[:cut]
        self._held = held[cut:]
        self._offset = last
        if self._held:
            out += self._comments_only(self._held, self._offset)
        return _without(out, drop) if drop else out

    def _comments_only(self, held: bytes, base: int) -> bytes:
        """Forward held bytes that are only complete comment or blank lines (keep-alive pings)."""
        if held.endswith((b"\n", b"\r")) and all(not line or line[:1] == b":" for line in held.splitlines()):
            self._held = b""
            self._offset = base + len(held)
            return held
        self._held = held
        self._offset = base
        return b""

    def _inspect(self, data: str | bytes, now_ns: int) -> bool:
        """Note what one event says. Returns True for a usage-only event (no choices)."""
        if data == b"[DONE]" or data == "[DONE]":
            self.done = True
            return False
        try:
            obj = loads(data)
        except JSONDecodeError:
            self.malformed += 1
            return False
        if type(obj) is not dict:
            return False
        if self.response_id is None:
            self.response_id, self.model, self.created = obj.get("id"), obj.get("model"), obj.get("created")
        usage = obj.get("usage")
        if usage is not None and type(usage) is dict:
            self.usage = Usage.of(usage)
        if "error" in obj:
            error = obj["error"]
            self.upstream_error = str(error.get("message", error) if isinstance(error, dict) else error)[:300]
        choices = obj.get("choices")
        if not choices:
            return usage is not None
        if type(choices) is list:
            for choice in choices:
                if type(choice) is not dict:
                    continue
                delta = choice.get("delta")
                if delta is not None and type(delta) is dict:
                    text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                else:
                    text = choice.get("text")
                if text and type(text) is str:
                    if self.first_token_ns is None:
                        self.first_token_ns = now_ns
                    self.last_token_ns = now_ns
                    self.content_chunks += 1
                    if self.keep_text:
                        self.pieces.append(text)
                reason = choice.get("finish_reason")
                if reason:
                    self.finish_reason = str(reason)
        return False

    def close(self) -> None:
        """End of the upstream stream: a trailing CR may have completed a last event."""
        for ev in self.parser.close():
            self._inspect(ev.data, time.perf_counter_ns())

    # -- results --------------------------------------------------------------------------

    @property
    def held_partial(self) -> bool:
        return bool(self._held)

    def output_tokens(self) -> tuple[int | None, str]:
        """Output tokens and where the figure came from: the backend's usage, else counted chunks."""
        if self.usage is not None and self.usage.completion_tokens is not None:
            return self.usage.completion_tokens, "usage"
        return self.content_chunks, "chunks"

    def prompt_tokens(self) -> int | None:
        return self.usage.prompt_tokens if self.usage is not None else None

    def tpot_s(self) -> float | None:
        tokens, _ = self.output_tokens()
        if self.first_token_ns is None or self.last_token_ns is None or tokens is None or tokens < 2:
            return None
        return (self.last_token_ns - self.first_token_ns) / 1e9 / (tokens - 1)

    def text(self) -> str:
        return "".join(self.pieces)


def _without(data: bytes, spans: list[tuple[int, int]]) -> bytes:
    parts, pos = [], 0
    for start, end in spans:
        parts.append(data[pos:start])
        pos = end
    parts.append(data[pos:])
    return b"".join(parts)


class ChatErrorChoice(TypedDict):
    """The one choice of a chat stream's error event (an empty delta)."""

    index: int
    delta: dict[str, str]
    logprobs: None
    finish_reason: str


class TextErrorChoice(TypedDict):
    """The one choice of a completions stream's error event (empty text)."""

    index: int
    text: str
    logprobs: None
    finish_reason: str


def error_event(tap: StreamTap, message: str, code: str, request_id: str) -> bytes:
    """The last event of a stream that broke after bytes reached the client, then `[DONE]`.

    It looks like a final chunk (same id and model as the stream, one choice with
    `finish_reason: "error"`) carrying the usage so far and an OpenAI-style error object.
    """
    tokens, source = tap.output_tokens()
    prompt = tap.prompt_tokens()
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": tokens,
        "total_tokens": prompt + tokens if prompt is not None and tokens is not None else None,
        "completion_tokens_source": source,
    }
    if tap.endpoint == "chat":
        choice: ChatErrorChoice | TextErrorChoice = {
            "index": 0,
            "delta": {},
            "logprobs": None,
            "finish_reason": "error",
        }
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": "error"}
        kind = "text_completion"
    body = {
        "id": tap.response_id or request_id,
        "object": kind,
        "created": tap.created if isinstance(tap.created, int) else int(time.time()),
        "model": tap.model,
        "choices": [choice],
        "usage": usage,
        "error": {"message": message, "type": "upstream_error", "param": None, "code": code},
    }
    return b"data: " + orjson.dumps(body) + b"\n\n" + DONE


def whole_response(body: bytes, endpoint: Endpoint, want_text: bool) -> tuple[Usage | None, str | None]:
    """The usage of a whole (non-streamed) response body, and its answer's text when `want_text`."""
    try:
        obj = loads(body)
    except JSONDecodeError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    usage = Usage.of(obj.get("usage"))
    if not want_text:
        return usage, None
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return usage, None
    first = choices[0]
    if endpoint == "chat":
        message = first.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        return usage, content if isinstance(content, str) else None
    text = first.get("text")
    return usage, text if isinstance(text, str) else None
