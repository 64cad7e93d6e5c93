"""Run the gateway: listen, reload on SIGHUP, drain in-flight streams on SIGTERM/SIGINT.

Draining: /healthz turns 503 (load balancers stop sending), the listening socket closes, a new
request on an open keep-alive connection gets 503, and requests in flight get up to `drain_s` to
finish; a stream still running after that ends with an error event saying the gateway is shutting
down (code `gateway_shutdown`), and a request still waiting for its backend gets 503.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from collections.abc import Awaitable, Callable

from tokenrace import aio
from tokenrace.gateway.app import Gateway, build_handler
from tokenrace.gateway.http import Handler, Server

# A worker of many (workers.py) shares the port and wraps the handler to answer for all workers.
Wrap = Callable[[Handler], Awaitable[Handler]]


async def start(
    gw: Gateway, host: str | None = None, port: int | None = None, wrap: Wrap | None = None
) -> tuple[Server, str]:
    """Start the gateway and listen (port 0 picks a free one). Returns the server and the base URL `http://host:port`.

    `wrap`: this process is one worker of several on one port (SO_REUSEPORT); it wraps the handler."""
    config = gw.runtime.config
    await gw.start()
    handler = build_handler(gw)
    if wrap is not None:
        handler = await wrap(handler)
    server = Server(handler, lambda: gw.runtime.config.limits, lambda reason: gw.metrics.rejected.labels(reason).inc())
    bind_host = host if host is not None else config.listen.host
    bind_port = port if port is not None else config.listen.port
    try:
        bound = await server.listen(bind_host, bind_port, reuse_port=wrap is not None)
    except BaseException:
        await gw.close()
        raise
    url_host = f"[{bind_host}]" if ":" in bind_host else bind_host
    return server, f"http://{url_host}:{bound}"


async def drain(gw: Gateway, server: Server) -> None:
    """Stop listening, let in-flight requests finish for up to drain_s, end the rest, close."""
    gw.draining = server.draining = True
    drain_s = gw.runtime.config.drain_s
    gw.event("draining", in_flight=len(gw.active), drain_s=drain_s)
    server.stop_listening()
    deadline = time.monotonic() + drain_s
    while gw.active and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    left = list(gw.active)
    for task in left:
        task.cancel()  # a stream ends with an error event (gateway_shutdown); a waiting request gets 503
    if left:
        await asyncio.wait(left, timeout=5)
    await server.close()
    await gw.close()
    gw.event("stopped", cut_short=len(left))


async def serve(
    gw: Gateway,
    host: str | None = None,
    port: int | None = None,
    ready_cb: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    freeze_gc: bool = False,
    wrap: Wrap | None = None,
) -> None:
    """Serve until `stop` is set (None: until SIGTERM/SIGINT). SIGHUP reloads the config file."""
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, gw.reload)
    server, url = await start(gw, host, port, wrap)
    try:
        if freeze_gc:
            quiet_gc()
        gw.event("listening", url=url, routes=list(gw.runtime.routes), backends=list(gw.runtime.backends))
        if ready_cb is not None:
            ready_cb(url)
        await stop.wait()
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        await drain(gw, server)


def quiet_gc() -> None:
    """Keep collector pauses off the p99: freeze what start-up allocated.

    A full collection walks every tracked object, including the ~10^5 that importing aiohttp,
    pydantic and prometheus_client leaves behind; frozen, they are never walked again. The
    collection thresholds stay at their defaults: raising them (as the fake server does) let
    cyclic garbage pile up in the older generations and the resident size grow by ~0.4 MiB/s
    under the soak test's traffic, where with the defaults it stays flat.
    """
    gc.collect()
    gc.freeze()


def run(
    gw: Gateway,
    host: str | None = None,
    port: int | None = None,
    ready_cb: Callable[[str], None] | None = None,
    wrap: Wrap | None = None,
) -> None:
    """Blocking: serve on the project's event loop (uvloop where installed) until SIGTERM/SIGINT."""
    aio.run(serve(gw, host, port, ready_cb, freeze_gc=True, wrap=wrap))
