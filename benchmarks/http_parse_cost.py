"""What does reading one request cost the gateway's server side, without the sockets?

In-process: one `gateway.http.Connection` on a transport that drops what it is given, fed the
same non-streaming chat request again and again (a typical SDK's head, a 150-byte body). Counted:
the parse, the gateway's checks and the Request object, up to the handler's dispatch (the
handler does not run). Printed: CPU µs per request (process time), the best of `--repeats` runs
of `--requests` each. benchmarks/http_server_cost.py measures the whole server over sockets.

    python benchmarks/http_parse_cost.py
    python benchmarks/http_parse_cost.py --requests 50000 --repeats 7
"""

from __future__ import annotations

import argparse
import asyncio
import time

from tokenrace.gateway import http

REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept-Encoding: identity\r\n"
    b"Content-Type: application/json\r\nUser-Agent: OpenAI/Python 1.50.0\r\n"
    b"Authorization: Bearer abcdefghijklmnop\r\nContent-Length: 150\r\n\r\n" + b"x" * 150
)


class Sink:
    """A transport that takes everything and says nothing."""

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> None:
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Limits:
    max_body_bytes, client_idle_s, client_body_s = 1 << 20, 75.0, 30.0


async def measure(requests: int, repeats: int) -> float:
    conn = http.Connection(http.Server(None, lambda: Limits))  # type: ignore[arg-type]
    conn.connection_made(Sink())  # type: ignore[arg-type]
    taken: list[http.Request] = []
    conn._dispatch = taken.append  # type: ignore[method-assign,assignment]  # stop at the handler's door
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(requests):
            conn.data_received(REQUEST)
        best = min(best, (time.process_time() - t0) / requests)
        assert len(taken) == requests and taken[-1].body == REQUEST[-150:]
        taken.clear()
    return best * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    us = asyncio.run(measure(args.requests, args.repeats))
    print(f"{us:.2f} us of CPU per request (parse + checks + Request), best of {args.repeats} x {args.requests}")


if __name__ == "__main__":
    main()
