"""A raw aiohttp client for the fake server's tests (the real tokenrace client is tested elsewhere).

No pytest-asyncio here: each test drives its client with asyncio.run().
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

# Quick timing: shape tests should not wait for realistic latencies.
QUICK = {"ttft_ms": 1.0, "itl_ms": 0.5, "output_tokens": 8}
USER = [{"role": "user", "content": "hello there general kenobi"}]


@dataclass
class Reply:
    """What the raw client saw: status, headers, SSE events (parsed) or the body."""

    status: int
    headers: Mapping[str, str]
    raw: bytes = b""
    events: list[Any] = field(default_factory=list)  # dicts, "[DONE]", or raw text if not JSON
    arrival_ns: list[int] = field(default_factory=list)  # perf_counter_ns per event line

    def json(self) -> Any:
        return orjson.loads(self.raw)

    def chunks(self) -> list[dict[str, Any]]:
        return [e for e in self.events if isinstance(e, dict)]

    def content_chunks(self) -> list[dict[str, Any]]:
        return [c for c in self.chunks() if c["choices"] and _has_text(c["choices"][0])]


def _has_text(choice: Mapping[str, Any]) -> bool:
    if "text" in choice:
        return bool(choice["text"])
    delta = choice.get("delta", {})
    return bool(delta.get("content") or delta.get("reasoning_content"))


def _parse_event(payload: str) -> Any:
    if payload == "[DONE]":
        return payload
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload


async def _read_sse(resp: aiohttp.ClientResponse, reply: Reply) -> None:
    async for line in resp.content:
        stamp = time.perf_counter_ns()
        text = line.decode().strip()
        if text.startswith("data: "):
            reply.events.append(_parse_event(text.removeprefix("data: ")))
            reply.arrival_ns.append(stamp)


async def apost(session: aiohttp.ClientSession, url: str, body: Any, headers: Mapping[str, str] | None = None) -> Reply:
    """POST and read the whole reply; SSE replies are split into events."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with session.post(url, data=data, headers={"Content-Type": "application/json", **(headers or {})}) as resp:
        reply = Reply(resp.status, resp.headers.copy())
        if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            await _read_sse(resp, reply)
        else:
            reply.raw = await resp.read()
        return reply


def post(url: str, body: Any, headers: Mapping[str, str] | None = None) -> Reply:
    """Synchronous one-shot POST."""

    async def run() -> Reply:
        async with aiohttp.ClientSession() as session:
            return await apost(session, url, body, headers)

    return asyncio.run(run())


def get(url: str, headers: Mapping[str, str] | None = None) -> Reply:
    async def run() -> Reply:
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
            return Reply(resp.status, resp.headers.copy(), raw=await resp.read())

    return asyncio.run(run())


def chat(stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "messages": USER, "stream": stream, **extra}


def completion(stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "prompt": "one two three", "stream": stream, **extra}
