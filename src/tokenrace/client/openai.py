"""OpenAI-compatible client for /v1/chat/completions and /v1/completions, streaming or not.

One call = one RequestRecord. Nothing here raises for a failed request: the record carries an error
kind and message, and the caller goes on.
"""

from __future__ import annotations

import asyncio
import errno
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from tokenrace.client.records import RequestRecord, cached_tokens_of
from tokenrace.client.sse import SSEParser
from tokenrace.client.transport import StampingHandler, Timeouts, make_session
from tokenrace.redact import Redactor

perf_ns = time.perf_counter_ns


@dataclass(slots=True)
class Prompt:
    """What to send. `messages` for chat, `text` for completions (either is derived if missing)."""

    messages: list[dict[str, Any]] | None = None
    text: str | None = None
    max_tokens: int | None = None
    label: str | None = None
    # Headers for this request only, e.g. a multi-turn session's id for routers that pin sessions.
    headers: dict[str, str] | None = None

    def as_text(self) -> str:
        if self.text is not None:
            return self.text
        return "\n".join(str(m.get("content", "")) for m in self.messages or [])

    def as_messages(self) -> list[dict[str, Any]]:
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.text or ""}]


@dataclass(slots=True)
class RequestOptions:
    api: str = "chat"  # chat | completions
    stream: bool = True
    include_usage: bool = True
    max_tokens: int | None = 256
    temperature: float | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    extra_headers: dict[str, str] = field(default_factory=dict)


class OpenAIClient:
    """Holds the pooled session. Use as `async with OpenAIClient(...) as c: await c.send(...)`."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        options: RequestOptions | None = None,
        timeouts: Timeouts | None = None,
        max_connections: int = 64,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.options = options or RequestOptions()
        self.timeouts = timeouts or Timeouts()
        self._api_key = api_key
        self._max_connections = max_connections
        self.redact = Redactor(api_key)
        self.session: aiohttp.ClientSession | None = None
        self.stamping = False

    async def __aenter__(self) -> OpenAIClient:
        self.session, self.stamping = make_session(self._max_connections, self.timeouts)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()

    @property
    def url(self) -> str:
        return f"{self.base_url}/{'chat/completions' if self.options.api == 'chat' else 'completions'}"

    def headers(self, prompt: Prompt | None = None) -> dict[str, str]:
        h = {"Content-Type": "application/json", **self.options.extra_headers}
        if prompt is not None and prompt.headers:
            h.update(prompt.headers)
        if self._api_key:
            h["Authorization"] = f"Bearer {self._api_key}"
        return h

    def body(self, prompt: Prompt) -> dict[str, Any]:
        o = self.options
        b: dict[str, Any] = {"model": self.model, "stream": o.stream}
        if o.api == "chat":
            b["messages"] = prompt.as_messages()
        else:
            b["prompt"] = prompt.as_text()
        max_tokens = prompt.max_tokens if prompt.max_tokens is not None else o.max_tokens
        if max_tokens is not None:
            b["max_tokens"] = max_tokens
        if o.temperature is not None:
            b["temperature"] = o.temperature
        if o.seed is not None:
            b["seed"] = o.seed
        if o.stream and o.include_usage:
            b["stream_options"] = {"include_usage": True}
        b.update(o.extra_body)
        return b

    async def send(self, prompt: Prompt, rec: RequestRecord) -> RequestRecord:
        assert self.session is not None, "use the client as an async context manager"
        payload = orjson.dumps(self.body(prompt))
        headers = self.headers(prompt)
        rec.max_tokens = prompt.max_tokens if prompt.max_tokens is not None else self.options.max_tokens
        reader = _StreamReader(rec, self.options.api) if self.options.stream else None
        deadline = _Deadline(self.timeouts)
        rec.begin_ns = rec.start_ns = perf_ns()
        try:
            async with asyncio.timeout_at(deadline.first(rec.start_ns)) as tm:
                await self._exchange_fresh(payload, headers, rec, reader, tm, deadline)
        except aiohttp.ConnectionTimeoutError as exc:  # a TimeoutError too: the connect limit, not ours
            rec.fail(*_classify(exc))
        except TimeoutError:
            rec.fail(deadline.kind(), deadline.message())
        except asyncio.CancelledError:
            rec.fail("cancelled", "interrupted before the response ended")
            rec.end_ns = rec.end_ns or perf_ns()
            raise
        except aiohttp.ClientError as exc:
            rec.fail(*_classify(exc))
        except OSError as exc:
            rec.fail(*_classify(exc))
        finally:
            if rec.end_ns is None:
                rec.end_ns = perf_ns()
            if rec.new_connection is None and rec.status is not None:
                rec.new_connection = False
            if rec.error_message:
                rec.error_message = self.redact(rec.error_message)
        _check_empty(rec)
        return rec

    async def _exchange_fresh(
        self,
        payload: bytes,
        headers: dict[str, str],
        rec: RequestRecord,
        reader: _StreamReader | None,
        tm: Any,
        deadline: _Deadline,
    ) -> None:
        """Send, replacing pooled keep-alive connections the server has already closed.

        llama.cpp's server closes the connection after each stream while advertising keep-alive; a
        request written on such a connection fails before the server sees it. When a *reused*
        connection fails before any response byte, send again (each failed try discards one dead
        pooled connection, so this ends); the time lost stays inside this request's latency.
        """
        for _ in range(self._max_connections + 1):
            try:
                await self._exchange(payload, headers, rec, reader, tm, deadline)
                return
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                if rec.connect_ns is not None or rec.headers_ns is not None:
                    raise
                rec.retried_stale_connection = True
        await self._exchange(payload, headers, rec, reader, tm, deadline)

    async def _exchange(
        self,
        payload: bytes,
        headers: dict[str, str],
        rec: RequestRecord,
        reader: _StreamReader | None,
        tm: Any,
        deadline: _Deadline,
    ) -> None:
        assert self.session is not None
        async with self.session.post(self.url, data=payload, headers=headers, trace_request_ctx=rec) as resp:
            rec.headers_ns = perf_ns()
            _mark_sent(resp, rec)
            rec.status = resp.status
            rec.response_id = resp.headers.get("x-request-id")
            if resp.status >= 400:
                await self._http_error(resp, rec)
            elif reader is not None:
                await reader.read(resp, tm, deadline)
            else:
                await _read_body(resp, rec)

    async def _http_error(self, resp: aiohttp.ClientResponse, rec: RequestRecord) -> None:
        raw = await resp.read()
        rec.end_ns = perf_ns()
        message = error_message_from_body(raw) or resp.reason or ""
        retry = resp.headers.get("Retry-After")
        if retry is not None:
            try:
                rec.retry_after_s = float(retry)
            except ValueError:
                rec.retry_after_s = None
        rec.fail(f"http_{resp.status}", f"HTTP {resp.status}: {message}", resp.status)


def _mark_sent(resp: aiohttp.ClientResponse, rec: RequestRecord) -> None:
    """Stamp the send: just before the write of the request's last byte, or when it drained.

    Only when the connection wrote during this request (not an earlier one). A short response read
    whole with its headers has already released its connection, so the protocol is found through
    the response (a private attribute; without it, start stays at begin).
    """
    proto = getattr(resp, "_protocol", None)
    if not isinstance(proto, StampingHandler) or proto.written_ns is None or proto.written_ns < rec.begin_ns:
        return
    if proto.drained_ns is not None:
        rec.mark_sent(proto.drained_ns)
    elif rec.write_ns is not None and rec.write_ns >= rec.begin_ns:
        rec.mark_sent(rec.write_ns)


def error_message_from_body(raw: bytes) -> str | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:300].decode("utf-8", "replace").strip() or None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:300]
        if isinstance(err, str):
            return err[:300]
        if "detail" in obj:
            return str(obj["detail"])[:300]
    return str(obj)[:300]


class _Deadline:
    """Tracks which limit an asyncio.timeout stands for, so a timeout gets the right kind."""

    def __init__(self, t: Timeouts) -> None:
        self.t = t
        self.phase = "first_byte"
        self.total_at: float | None = None

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    def first(self, start_ns: int) -> float | None:
        now = self._loop_time()
        self.total_at = now + self.t.total if self.t.total else None
        return self._pick(now + self.t.first_byte if self.t.first_byte else None)

    def idle(self) -> float | None:
        self.phase = "idle"
        return self._pick(self._loop_time() + self.t.idle if self.t.idle else None)

    def _pick(self, phase_at: float | None) -> float | None:
        if self.total_at is None:
            return phase_at
        if phase_at is None or self.total_at <= phase_at:
            return self.total_at
        return phase_at

    def kind(self) -> str:
        if self.total_at is not None and self._loop_time() >= self.total_at - 1e-3:
            return "timeout_total"
        return f"timeout_{self.phase}"

    def message(self) -> str:
        limits = {"timeout_total": self.t.total, "timeout_first_byte": self.t.first_byte, "timeout_idle": self.t.idle}
        kind = self.kind()
        return f"{kind.replace('_', ' ')} after {limits.get(kind)} s"


class _StreamReader:
    """Reads an SSE body, timing each event by the arrival of its last byte."""

    __slots__ = ("rec", "chat", "done", "parser", "pieces")

    def __init__(self, rec: RequestRecord, api: str) -> None:
        self.rec = rec
        self.chat = api == "chat"
        self.done = False
        self.parser = SSEParser()
        self.pieces: list[str] = []

    async def read(self, resp: aiohttp.ClientResponse, tm: Any, deadline: _Deadline) -> None:
        proto = resp.connection.protocol if resp.connection is not None else None
        content = resp.content
        try:
            await self._loop(content, proto if isinstance(proto, StampingHandler) else None, tm, deadline)
        finally:
            self.rec.text = "".join(self.pieces)
        self.rec.end_ns = perf_ns()
        if not self.done:
            self.rec.fail("truncated", "the stream ended without data: [DONE]")

    async def _loop(self, content: Any, proto: StampingHandler | None, tm: Any, deadline: _Deadline) -> None:
        idx = 0
        async for data in content.iter_any():
            t_read = perf_ns()
            rx = proto.rx if proto is not None and proto.rx_payload is content else None
            for ev in self.parser.feed(data):
                t = t_read
                if rx is not None:
                    while idx < len(rx) and rx[idx][0] < ev.end:
                        idx += 1
                    if idx < len(rx):
                        t = rx[idx][1]
                self.on_event(ev.data, t)
            if self.rec.cancel_after_chunks is not None and len(self.rec.chunk_ns) >= self.rec.cancel_after_chunks:
                # A client walking away mid-answer (--cancel-rate): closing the response closes the
                # connection, which is what the server sees when a user stops a generation.
                n = len(self.rec.chunk_ns)
                self.rec.fail(
                    "cancelled",
                    f"cancelled by the client after {n} content chunks (the run cancels a share of requests)",
                )
                self.done = True
                return
            tm.reschedule(deadline.idle())
        for ev in self.parser.close():
            self.on_event(ev.data, perf_ns())

    def on_event(self, data: str, t: int) -> None:
        rec = self.rec
        if data == "[DONE]":
            self.done = True
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            rec.fail("malformed_sse", f"unparseable SSE data: {data[:120]!r}")
            return
        if not isinstance(obj, dict):
            rec.fail("malformed_sse", f"SSE data is not an object: {data[:120]!r}")
            return
        if rec.response_id is None:
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
        rec = self.rec
        answer, reasoning = _content_of(choice, self.chat)
        if answer or reasoning:
            if rec.first_token_ns is None:
                rec.first_token_ns = t
            if answer and rec.first_answer_ns is None:
                rec.first_answer_ns = t
            rec.chunk_ns.append(t)
            rec.chunk_chars.append(len(answer) + len(reasoning))
            self.pieces.append(reasoning + answer)
            if reasoning and not answer:
                rec.reasoning_chunks += 1
        reason = choice.get("finish_reason")
        if reason:
            rec.finish_reason = reason


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


async def _read_body(resp: aiohttp.ClientResponse, rec: RequestRecord) -> None:
    raw = await resp.read()
    rec.end_ns = perf_ns()
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        rec.fail("malformed_body", f"unparseable JSON body: {raw[:120]!r}")
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
    rec.text = reasoning + answer
    rec.finish_reason = choice.get("finish_reason")


def _check_empty(rec: RequestRecord) -> None:
    if rec.ok and not rec.text:
        rec.fail("empty", "the response carried no generated content")


def _classify(exc: BaseException) -> tuple[str, str]:
    """Map a transport exception to (kind, message)."""
    name = type(exc).__name__
    dns = getattr(aiohttp, "ClientConnectorDNSError", None)
    if dns is not None and isinstance(exc, dns):
        return "dns", f"DNS lookup failed: {exc}"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "timeout_connect", f"connect timed out: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        if isinstance(err, ConnectionRefusedError) or getattr(err, "errno", None) == errno.ECONNREFUSED:
            return "connection_refused", f"connection refused: {exc}"
        if "Name or service not known" in str(exc) or "nodename nor servname" in str(exc):
            return "dns", f"DNS lookup failed: {exc}"
        return "connect_error", f"{name}: {exc}"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "truncated", f"the stream was cut: {exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server_disconnected", "the server closed the connection before answering"
    if isinstance(exc, (ConnectionResetError, aiohttp.ClientOSError)):
        return "connection_reset", f"{name}: {exc}"
    return "client_error", f"{name}: {exc}"
