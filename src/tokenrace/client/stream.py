"""Reading a streamed answer: the SSE loop that stamps each event at the arrival of its last byte.

`StreamReader` owns the loop; each API's reader (tokenrace.client.apis) says what one event means
in `on_event`. The loop does the same work per chunk whatever the API, so the chat reader, the one
every text benchmark uses, pays for nothing the others need.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson

from tokenrace.client.sse import SSEParser
from tokenrace.client.transport import StampingHandler, Timeouts
from tokenrace.model.records import RequestRecord

perf_ns = time.perf_counter_ns


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


class Deadline:
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


class StreamReader:
    """Reads an SSE body, timing each event by the arrival of its last byte.

    Subclasses set `end_mark` (the event that ends a complete stream, named in the truncation
    message) and implement `on_event(data, t)`, which sets `done` when that event arrives.
    """

    __slots__ = ("rec", "done", "parser", "pieces", "chunk_ns", "chunk_chars", "answered", "reasoning")
    end_mark = "data: [DONE]"

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.done = False
        self.parser = SSEParser()
        self.pieces: list[str] = []
        # What a chunk updates is held here, not looked up on the record (a pydantic model, whose
        # attribute costs ~40 ns more than a slot, and ~0.4 us to set): the record's own lists, and
        # the first-answer mark and reasoning count, written to the record when the stream ends.
        self.chunk_ns = rec.chunk_ns
        self.chunk_chars = rec.chunk_chars
        self.answered = False
        self.reasoning = 0  # chunks with reasoning content only

    async def read(self, resp: aiohttp.ClientResponse, tm: Any, deadline: Deadline) -> None:
        proto = resp.connection.protocol if resp.connection is not None else None
        content = resp.content
        try:
            await self._loop(content, proto if isinstance(proto, StampingHandler) else None, tm, deadline)
        finally:
            self.end()
        self.rec.end_ns = perf_ns()
        if not self.done:
            self.rec.fail("truncated", f"the stream ended without {self.end_mark}")

    async def _loop(self, content: Any, proto: StampingHandler | None, tm: Any, deadline: Deadline) -> None:
        idx = 0
        chunk_ns, cancel_after = self.chunk_ns, self.rec.cancel_after_chunks
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
            if cancel_after is not None and len(chunk_ns) >= cancel_after:
                # A client walking away mid-answer (--cancel-rate): closing the response closes the
                # connection, which is what the server sees when a user stops a generation.
                n = len(chunk_ns)
                self.rec.fail(
                    "cancelled",
                    f"cancelled by the client after {n} content chunks (the run cancels a share of requests)",
                )
                self.done = True
                return
            tm.reschedule(deadline.idle())
        for ev in self.parser.close():
            self.on_event(ev.data, perf_ns())

    def first_token(self, t: int) -> None:
        """The first content chunk arrived at `t`."""
        rec = self.rec
        rec.first_token_ns = t
        if rec.on_first_token is not None:
            rec.on_first_token(t)

    def end(self) -> None:
        """The stream is over (or cut): what the reader held goes to the record."""
        self.rec.text = "".join(self.pieces)
        self.rec.reasoning_chunks = self.reasoning

    def on_event(self, data: str, t: int) -> None:
        raise NotImplementedError

    def event_object(self, data: str) -> dict[str, Any] | None:
        """The event's JSON object, or None after recording why it is not one."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.rec.fail("malformed_sse", f"unparseable SSE data: {data[:120]!r}")
            return None
        if not isinstance(obj, dict):
            self.rec.fail("malformed_sse", f"SSE data is not an object: {data[:120]!r}")
            return None
        return obj

    def content(self, answer: str, reasoning: str, t: int) -> None:
        """One content chunk arrived at `t` (answer and/or reasoning text; at least one non-empty)."""
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
