"""What does an HTTP server side cost per request: aiohttp's, the gateway's own, a bare protocol?

This is the measurement behind the gateway's own server side (gateway/http.py, in place of
aiohttp's). Four servers on core 0 answer the same canned non-streaming chat completion: an
aiohttp handler (read the body, return a Response), the same on aiohttp's low-level `web.Server`
(no Application, router or middlewares), the gateway's `http.Server` (parse and check the head,
read the body, run a handler task, write a Reply), and a bare uvloop protocol (find the head's
end, read Content-Length bytes, write the answer: no task, no checks; the floor). The load is
benchmarks/gateway_overhead.py's instrument on core 1 (open-loop Poisson). Printed: each server's
CPU time per request in µs (user + system, from /proc, over the requests it answered). Each server
is measured twice (`--rounds`), interleaved.

    python benchmarks/http_server_cost.py
    python benchmarks/http_server_cost.py --rates 1000,3000 --duration 5
    python benchmarks/http_server_cost.py --kinds tokenrace --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateway_overhead as bench

ANSWER = (
    b'{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"w w w"},"finish_reason":"stop"}]}'
)


class Bare(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        length = bench.content_length(self.buf[:end]) or 0
        if len(self.buf) < end + 4 + length:
            return
        self.buf = self.buf[end + 4 + length :]
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
        )


async def serve(kind: str) -> None:
    loop = asyncio.get_running_loop()
    if kind == "aiohttp":
        from aiohttp import web  # noqa: PLC0415 - measured apart: each server process loads only its own stack, so the others run without it in their heap

        async def handler(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(body=ANSWER, content_type="application/json")

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
    elif kind == "aiohttp-lowlevel":  # aiohttp's protocol and request objects, no Application, router or middlewares
        from aiohttp import web  # noqa: PLC0415 - measured apart: each server process loads only its own stack, so the others run without it in their heap

        async def handle(request: web.BaseRequest) -> web.Response:
            await request.read()
            return web.Response(body=ANSWER, content_type="application/json")

        server = await loop.create_server(web.Server(handle, access_log=None), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
    elif kind == "tokenrace":  # the gateway's own server side (gateway/http.py), a task per request
        from tokenrace.gateway.http import Reply, Request, Server  # noqa: PLC0415 - measured apart: only this server process loads the gateway (pydantic, aiohttp, the client through it)

        class Limits:
            max_body_bytes, client_idle_s, client_body_s = 1 << 20, 75.0, 30.0

        async def answer(request: Request) -> Reply:
            return Reply(200, ANSWER)

        port = await Server(answer, Limits).listen("127.0.0.1", 0)
    else:
        server = await loop.create_server(Bare, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
    print(f"READY http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


KINDS = ("bare", "tokenrace", "aiohttp", "aiohttp-lowlevel")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--rates", default="1000,3000")
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--kinds", default=",".join(KINDS), help="which servers, comma-separated")
    p.add_argument("--rounds", type=int, default=2, help="how many times each server is measured")
    args = p.parse_args()
    if args.serve:
        os.sched_setaffinity(0, {bench.GATEWAY_CORE})
        uvloop.run(serve(args.serve))
        return
    inst = bench.Instrument(argparse.Namespace(tokens=16, ttft_ms=20.0, itl_ms=5.0))
    print(
        f"servers on core {bench.GATEWAY_CORE}, instrument on core {bench.LOAD_CORE}; non-streaming; {args.duration:g} s per rate"
    )
    try:
        kinds = [k for k in args.kinds.split(",") if k]
        if unknown := set(kinds) - set(KINDS):
            p.error(f"unknown kinds {sorted(unknown)}: choose from {', '.join(KINDS)}")
        for kind in kinds * args.rounds:
            proc = subprocess.Popen([sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE)
            assert proc.stdout is not None
            url = proc.stdout.readline().decode().split()[1]
            try:
                for rate in (float(r) for r in args.rates.split(",")):
                    cpu0 = bench.cpu_seconds(proc.pid)
                    result = inst.run(url, False, rate=rate, duration=args.duration)
                    used = bench.cpu_seconds(proc.pid) - cpu0
                    print(
                        f"{kind:16s} {rate:6.0f} RPS: {result['n']} requests, {used / max(1, result['n']) * 1e6:.0f} us of CPU per request",
                        flush=True,
                    )
            finally:
                proc.kill()
                proc.wait()
    finally:
        inst.close()


if __name__ == "__main__":
    main()
