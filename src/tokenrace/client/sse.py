"""An incremental Server-Sent Events parser.

Pure and I/O-free: `feed(bytes)` returns the events completed by those bytes, and the result is the
same for any split of the byte stream (a property the tests check with hypothesis). It follows the
WHATWG rules that matter for LLM streams: lines end in LF, CRLF or CR; `data:` lines of one event are
joined with LF; one leading space after the colon is dropped; lines starting with `:` are comments; a
blank line dispatches the event; an unterminated event at end of stream is discarded.

Each event also carries `end`, the offset in the byte stream just past the blank line that completed
it, so that a caller can map an event back to the moment its last byte arrived.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class SSEEvent:
    data: str
    event: str | None = None
    id: str | None = None
    end: int = 0


class SSEParser:
    __slots__ = ("_buf", "_pos", "_data", "_event", "_id", "_has_data")

    def __init__(self) -> None:
        self._buf = b""  # bytes of the current, unterminated line
        self._pos = 0  # stream offset of the first byte not yet in _buf
        self._data: list[bytes] = []
        self._event: bytes | None = None
        self._id: bytes | None = None
        self._has_data = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        buf = self._buf + chunk if self._buf else chunk
        base = self._pos - len(self._buf)  # stream offset of buf[0]
        self._pos += len(chunk)
        events: list[SSEEvent] = []
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf >= 0 else n)
            if cr >= 0:
                if cr + 1 == n:  # a CR at the end may be the first half of CRLF: wait
                    break
                end_line, next_start = cr, cr + 2 if buf[cr + 1] == 0x0A else cr + 1
            elif lf >= 0:
                end_line, next_start = lf, lf + 1
            else:
                break
            ev = self._line(buf[start:end_line], base + next_start)
            if ev is not None:
                events.append(ev)
            start = next_start
        self._buf = buf[start:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: a CR held back as a possible CRLF half is a line end after all."""
        if not self._buf.endswith(b"\r"):
            return []
        buf, self._buf = self._buf, b""
        events = []
        base = self._pos - len(buf)
        start = 0
        while start < len(buf):
            cut = buf.index(b"\r", start) if b"\r" in buf[start:] else len(buf)
            ev = self._line(buf[start:cut], base + cut + 1)
            if ev is not None:
                events.append(ev)
            start = cut + 1
        return events

    def _line(self, line: bytes, end: int) -> SSEEvent | None:
        if not line:
            return self._dispatch(end)
        if line[0] == 0x3A:  # ':' comment (keep-alive pings)
            return None
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if field == b"data":
            self._data.append(value)
            self._has_data = True
        elif field == b"event":
            self._event = value
        elif field == b"id":
            if b"\x00" not in value:
                self._id = value
        return None

    def _dispatch(self, end: int) -> SSEEvent | None:
        if not self._has_data:
            self._event = None
            return None
        data = b"\n".join(self._data).decode("utf-8", "replace")
        event = self._event.decode("utf-8", "replace") if self._event is not None else None
        ident = self._id.decode("utf-8", "replace") if self._id is not None else None
        self._data = []
        self._has_data = False
        self._event = None
        return SSEEvent(data=data, event=event, id=ident, end=end)
