"""The send log: what the fake server sent, when, to whom.

Every generation request (POST /v1/chat/completions, /v1/completions) gets one
`RequestRecord`. Each SSE event (or the one non-streaming body) gets a
`ChunkStamp` (t_ns, tokens, kind) whose `t_ns` is `time.perf_counter_ns()` taken
immediately before its bytes are handed to the transport. On Linux perf_counter_ns is
CLOCK_MONOTONIC, shared by all processes, so a client in another process can
subtract its own arrival stamps from these send stamps.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Literal, TypeAlias

import orjson

ChunkKind: TypeAlias = Literal["role", "content", "reasoning", "tool", "usage", "done", "malformed", "body"]


# A plain tuple, not a class: tuples of atomic values drop out of the garbage
# collector's tracking, so a long log does not make GC pauses (which stall every
# stream at once) grow. JSON turns it into {"t_ns", "tokens", "kind"}.
ChunkStamp: TypeAlias = tuple[int, int, ChunkKind]


@dataclass
class RequestRecord:
    """One log entry. `status` 0 means no HTTP response was sent (refused)."""

    id: str
    seq: int
    arrival_ns: int
    in_flight_at_arrival: int
    path: str
    stream: bool = False
    status: int = 0
    fault: str | None = None
    model: str | None = None
    chunks: list[ChunkStamp] = field(default_factory=list)
    end_ns: int | None = None
    prompt_tokens: int = 0
    # What the usage block reports; sum(chunk.tokens) is what was actually sent.
    completion_tokens: int = 0
    error: str | None = None
    # TCP_NODELAY on the server's socket: Nagle's algorithm would hold small
    # SSE events back waiting for ACKs and distort the timing being measured.
    tcp_nodelay: bool | None = None
    # The session header's value (FakeConfig.session_header), as a router would pin on it.
    session_id: str | None = None
    # Chat: the number of messages in the request; completions: None.
    messages: int | None = None
    # Prompt tokens served from the simulated prefix cache; None when the cache is off.
    cached_tokens: int | None = None
    # When the request's last bytes came off the socket (before aiohttp parsed them); arrival_ns is
    # when its handler began. None when the server could not stamp receives.
    received_ns: int | None = None
    # The images the request carried, decoded (fake_images.ReceivedImage.as_json each); None: none.
    images: list[dict[str, Any]] | None = None
    # Embeddings: the inputs embedded; rerank: the documents ranked. None for generation.
    inputs: int | None = None
    # The names (never the values) of the credential and version headers the request carried.
    auth_headers: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        entry = asdict(self)
        entry["chunks"] = [{"t_ns": t, "tokens": n, "kind": k} for t, n, k in self.chunks]
        return entry


class SendLog:
    """Records, arrival order, and the in-flight gauge of one server."""

    def __init__(self, log_file: IO[bytes] | None = None) -> None:
        self.records: list[RequestRecord] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._seq = 0
        self.log_file = log_file

    def open(self, request_id: str, path: str, arrival_ns: int) -> RequestRecord:
        """Start a record at arrival; the request now counts as in flight."""
        self._seq += 1
        record = RequestRecord(
            id=request_id,
            seq=self._seq,
            arrival_ns=arrival_ns,
            in_flight_at_arrival=self.in_flight,
            path=path,
        )
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.records.append(record)
        return record

    def close(self, record: RequestRecord) -> None:
        """End a record: stamp end_ns (unless already), leave the in-flight count."""
        if record.end_ns is None:
            record.end_ns = time.perf_counter_ns()
        self.in_flight -= 1
        if self.log_file is not None:
            self.log_file.write(orjson.dumps(record.as_json()) + b"\n")
            self.log_file.flush()

    def reset(self) -> None:
        """Forget past records and restart seq; requests in flight still count."""
        self.records = []
        self._seq = 0
        self.max_in_flight = self.in_flight

    def stats(self) -> dict[str, int]:
        return {
            "max_in_flight": self.max_in_flight,
            "in_flight": self.in_flight,
            "requests": len(self.records),
        }
