"""The floor: the least any client on this machine can see. Non-blocking sockets and one selector, no
HTTP library, in a process of its own.

It keeps `--streams` keep-alive connections busy with the same streaming request (closed loop), stamps
`perf_counter_ns()` just before the `send()` that writes each request (the request goes out in one
call) and right after each `recv()`, and counts SSE events by their blank-line ends, so event i of a
response is the server's i-th logged write. It parses nothing else: the response is done when its
chunked body ends. Each request carries `X-Session-ID: floor-<n>`, which the fake server logs.

    python benchmarks/raw_floor.py --url http://127.0.0.1:PORT --streams 8 --requests 80 --warmup 8 --fake '{...}'

prints one JSON line per measured request: {"session", "start_ns", "events_ns"}.
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

perf_ns = time.perf_counter_ns
END_OF_BODY = b"0\r\n\r\n"


@dataclass
class Stream:
    sock: socket.socket
    seq: int = -1
    start_ns: int = 0
    head: bytes | None = b""  # response head so far; None once it ended
    last: bytes = b""  # the body's last bytes: an event end or the body's end may span two reads
    events_ns: list[int] = field(default_factory=list)


def request_bytes(host: str, session: str, body: bytes) -> bytes:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Accept-Encoding: identity\r\nX-Session-ID: {session}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def on_bytes(s: Stream, data: bytes, t: int) -> bool:
    """Stamp the SSE events this read completed; True when the response ended."""
    if s.head is not None:
        s.head += data
        end = s.head.find(b"\r\n\r\n")
        if end < 0:
            return False
        data, s.head = s.head[end + 4 :], None
    # An event ends with a blank line; chunked framing ("\r\n<size>\r\n") never makes "\n\n".
    s.events_ns.extend([t] * (s.last[-1:] + data).count(b"\n\n"))
    s.last = (s.last + data)[-len(END_OF_BODY) :]
    return s.last == END_OF_BODY


def run(url: str, streams: int, requests: int, warmup: int, fake: dict[str, object]) -> list[dict[str, object]]:
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    sel = selectors.DefaultSelector()
    body = json.dumps(
        {
            "model": "fake-model",
            "stream": True,
            "messages": [{"role": "user", "content": "hello"}],
            "stream_options": {"include_usage": True},
            "fake": fake,
        }
    ).encode()
    total = warmup + requests
    next_seq = 0
    done: list[dict[str, object]] = []
    live = 0

    def send(s: Stream) -> None:
        nonlocal next_seq
        s.seq, next_seq = next_seq, next_seq + 1
        s.head, s.last, s.events_ns = b"", b"", []
        data = request_bytes(f"{host}:{port}", f"floor-{s.seq}", body)
        s.start_ns = perf_ns()
        s.sock.setblocking(True)  # one call writes it whole (a small request)
        s.sock.sendall(data)
        s.sock.setblocking(False)

    for _ in range(min(streams, total)):
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s = Stream(sock)
        sel.register(sock, selectors.EVENT_READ, s)
        send(s)
        live += 1
    while live:
        for key, _ in sel.select():
            s = key.data
            data = s.sock.recv(1 << 16)
            t = perf_ns()
            if not data:
                raise SystemExit(f"the server closed stream {s.seq}")
            if not on_bytes(s, data, t):
                continue
            if s.seq >= warmup:
                done.append({"session": f"floor-{s.seq}", "start_ns": s.start_ns, "events_ns": s.events_ns})
            if next_seq < total:
                send(s)
            else:
                sel.unregister(s.sock)
                s.sock.close()
                live -= 1
    return done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--fake", default="{}")
    a = ap.parse_args()
    for row in run(a.url, a.streams, a.requests, a.warmup, json.loads(a.fake)):
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
