"""The HTTP client of every API tokenrace speaks (chat, completions, responses, messages,
embeddings, rerank; each API's shapes are in tokenrace.client.apis), streaming or not.

One call = one RequestRecord. Nothing here raises for a failed request: the record carries an error
kind and message, and the caller goes on.
"""

from __future__ import annotations

import asyncio
import errno
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from tokenrace.client.apis import api_for
from tokenrace.client.apis.base import StructuredReader
from tokenrace.client.request import Prompt, RequestOptions, RequestSpec
from tokenrace.client.stream import Deadline, StreamReader, error_message_from_body
from tokenrace.client.structured import schema_checker
from tokenrace.client.transport import StampingHandler, Timeouts, make_session
from tokenrace.model.records import RequestRecord
from tokenrace.redact import Redactor

__all__ = ["Encoded", "OpenAIClient", "Prompt", "RequestOptions", "error_message_from_body"]

perf_ns = time.perf_counter_ns
# Appended to the error of a refused request that carried images: the usual cause, in one line.
IMAGES_HINT = "the request carried {n} image(s): the model or server may not accept images (a text-only model?)"


@dataclass(frozen=True, slots=True)
class Encoded:
    """A request built before its turn: the prompt, its JSON body and its headers, exactly as `send`
    would build them. A schedule that knows its prompts ahead (LoadGen's samples) encodes them
    before the test, so that the time from its hand-over to the socket holds none of this work."""

    prompt: Prompt
    payload: bytes
    headers: dict[str, str]


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
        self.api = api_for(self.options)
        self.timeouts = timeouts or Timeouts()
        self._api_key = api_key
        self._max_connections = max_connections
        self.redact = Redactor(api_key)
        self.session: aiohttp.ClientSession | None = None
        self.stamping = False
        schema = self.options.response_schema
        self._schema_valid = schema_checker(schema) if schema is not None else None

    async def __aenter__(self) -> OpenAIClient:
        self.session, self.stamping = make_session(self._max_connections, self.timeouts)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()

    @property
    def url(self) -> str:
        return self.api.url(self.base_url)

    def headers(self, prompt: Prompt | None = None) -> dict[str, str]:
        h = {"Content-Type": "application/json", **self.api.fixed_headers(), **self.options.extra_headers}
        if prompt is not None and prompt.headers:
            h.update(prompt.headers)
        if self._api_key:
            h.update(self.api.auth_headers(self._api_key))
        return h

    def body(self, prompt: Prompt) -> dict[str, Any]:
        return self.api.body(RequestSpec(self.model, prompt, self.options))

    def encode(self, prompt: Prompt) -> Encoded:
        return Encoded(prompt, orjson.dumps(self.body(prompt)), self.headers(prompt))

    async def send(self, prompt: Prompt | Encoded, rec: RequestRecord) -> RequestRecord:
        assert self.session is not None, "use the client as an async context manager"
        encoded = prompt if isinstance(prompt, Encoded) else self.encode(prompt)
        prompt, payload, headers = encoded.prompt, encoded.payload, encoded.headers
        api = self.api
        if api.generates:
            rec.max_tokens = prompt.max_tokens if prompt.max_tokens is not None else self.options.max_tokens
        else:
            rec.inputs = len(prompt.inputs) if prompt.inputs is not None else None
            rec.documents = len(prompt.documents) if prompt.documents is not None else None
        if prompt.images is not None:
            rec.images, rec.image_bytes, rec.image_pixels = (
                prompt.images.count,
                prompt.images.nbytes,
                prompt.images.pixels,
            )
        reader = self._reader(rec) if self.options.stream and api.streams else None
        deadline = Deadline(self.timeouts)
        body_answer: tuple[str, int] | None = None
        rec.begin_ns = rec.start_ns = perf_ns()
        try:
            async with asyncio.timeout_at(deadline.first(rec.start_ns)) as tm:
                body_answer = await self._exchange_fresh(payload, headers, rec, reader, tm, deadline)
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
        if api.generates:
            _check_empty(rec)
        if self.options.structured:
            self._check_answer(rec, reader, body_answer)
        if rec.images and rec.error_kind is not None and rec.error_kind.startswith("http_4"):
            rec.error_message = f"{rec.error_message} [{IMAGES_HINT.format(n=rec.images)}]"
        return rec

    def _reader(self, rec: RequestRecord) -> StreamReader:
        """The API's plain reader, or, when tools or a schema were asked for, the one that also reads
        tool calls and keeps the answer apart (so the plain path does no extra work per chunk)."""
        return self.api.structured_reader(rec) if self.options.structured else self.api.stream_reader(rec)

    def _check_answer(
        self, rec: RequestRecord, reader: StreamReader | None, body_answer: tuple[str, int] | None
    ) -> None:
        """After the request: count its tool calls and validate its answer against the schema."""
        found = reader.structured() if isinstance(reader, StructuredReader) else body_answer
        answer, calls = found if found is not None else ("", 0)
        rec.tool_calls = calls if self.options.tools is not None and found is not None else None
        if self._schema_valid is None or not rec.ok:
            return
        if calls and not answer.strip():
            return  # the model called a tool instead of answering: no answer to check
        rec.schema_valid = self._schema_valid(answer)

    async def _exchange_fresh(
        self,
        payload: bytes,
        headers: dict[str, str],
        rec: RequestRecord,
        reader: StreamReader | None,
        tm: Any,
        deadline: Deadline,
    ) -> tuple[str, int] | None:
        """Send, replacing pooled keep-alive connections the server has already closed.

        llama.cpp's server closes the connection after each stream while advertising keep-alive; a
        request written on such a connection fails before the server sees it. When a *reused*
        connection fails before any response byte, send again (each failed try discards one dead
        pooled connection, so this ends); the time lost stays inside this request's latency.
        """
        for _ in range(self._max_connections + 1):
            try:
                return await self._exchange(payload, headers, rec, reader, tm, deadline)
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                if rec.connect_ns is not None or rec.headers_ns is not None:
                    raise
                rec.retried_stale_connection = True
        return await self._exchange(payload, headers, rec, reader, tm, deadline)

    async def _exchange(
        self,
        payload: bytes,
        headers: dict[str, str],
        rec: RequestRecord,
        reader: StreamReader | None,
        tm: Any,
        deadline: Deadline,
    ) -> tuple[str, int] | None:
        """One exchange; for a whole body asked for tools or a schema, (its answer, its tool calls)."""
        assert self.session is not None
        async with self.session.post(self.url, data=payload, headers=headers, trace_request_ctx=rec) as resp:
            rec.headers_ns = perf_ns()
            _mark_sent(resp, rec)
            rec.status = resp.status
            rec.response_id = resp.headers.get("x-request-id")
            rec.served_by = resp.headers.get("x-tokenrace-backend")  # through a tokenrace gateway
            if resp.status >= 400:
                await self._http_error(resp, rec)
            elif reader is not None:
                await reader.read(resp, tm, deadline)
            else:
                return await self._read_body(resp, rec)
        return None

    async def _read_body(self, resp: aiohttp.ClientResponse, rec: RequestRecord) -> tuple[str, int] | None:
        raw = await resp.read()
        rec.end_ns = perf_ns()
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            rec.fail("malformed_body", f"unparseable JSON body: {raw[:120]!r}")
            return None
        self.api.read_body(rec, obj)
        return self.api.structured_body(obj) if self.options.structured else None

    async def _http_error(self, resp: aiohttp.ClientResponse, rec: RequestRecord) -> None:
        raw = await resp.read()
        rec.end_ns = perf_ns()
        message = error_message_from_body(raw) or resp.reason or ""
        hint = self.api.not_found_hint(self.url) if resp.status == 404 else None
        if hint:
            message = f"{message} ({hint})"
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
