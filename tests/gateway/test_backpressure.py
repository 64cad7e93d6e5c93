"""Backpressure with real sockets: a client that stops reading stops the gateway reading its backend.

The backend counts the bytes it managed to write (each write waits for its socket to drain): while
the client reads nothing, that count must stop far short of the whole stream, which the gateway
would otherwise read on and hold in memory. Then the client reads, and every event arrives.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from .helpers import CLIENT_KEY, GatewayThread, chat, config_text

EVENT_BYTES = 4096
EVENTS = 8 * 1024  # 32 MiB in all: more than every kernel buffer on the way can hold


def _event(i: int) -> bytes:
    chunk: dict[str, Any] = {
        "id": "s",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": ""}}],
    }
    head = json.dumps(chunk, separators=(",", ":")).encode()
    pad = EVENT_BYTES - len(head) - len(b"data: \n\n") - 8
    chunk["choices"][0]["delta"] = {"content": f"{i:08d}" + "x" * pad}
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


class StreamingBackend:
    """Answers every request with EVENTS chunked SSE events; `sent` counts the body bytes written."""

    def __init__(self) -> None:
        self.sent = 0
        self.done = False
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="streaming-backend").start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(EVENTS):
            event = _event(i)
            writer.write(b"%x\r\n%b\r\n" % (len(event), event))
            await writer.drain()
            self.sent += len(event)
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(done), done))
        await writer.drain()
        self.done = True
        writer.close()


def _settled(read: Callable[[], int], quiet_s: float, deadline_s: float) -> int:
    """Poll until the value stops changing for quiet_s (or the deadline passes); return it."""
    give_up = time.monotonic() + deadline_s
    last, since = read(), time.monotonic()
    while time.monotonic() < give_up:
        time.sleep(0.05)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last


@pytest.mark.slow
def test_a_client_that_stops_reading_pauses_the_upstream_read() -> None:
    backend = StreamingBackend()
    text = config_text({"a": {"url": backend.url}}, [{"model": "m", "backends": ["a"]}], limits={"client_write_s": 60})
    with GatewayThread(text) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        body = json.dumps(chat()).encode()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.settimeout(30)
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {CLIENT_KEY}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            first = sock.recv(4096)
            assert first.startswith(b"HTTP/1.1 200 ")
            held = _settled(lambda: backend.sent, quiet_s=1.0, deadline_s=30)  # the client reads nothing meanwhile
            total = EVENTS * EVENT_BYTES
            # cast: mypy would keep this narrowing past the calls below that change it
            assert not cast(object, backend.done) and held < total // 2, (held, total)
            received = bytearray(first)
            while not received.endswith(b"0\r\n\r\n"):
                piece = sock.recv(1 << 20)
                assert piece, "the gateway closed the stream early"
                received += piece
    assert backend.done and backend.sent == total
    assert received.count(b'"content":"') == EVENTS and b"data: [DONE]" in received
    print(f"held {held / 2**20:.1f} MiB of {total / 2**20:.0f} MiB")
