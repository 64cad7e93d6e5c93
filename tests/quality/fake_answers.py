"""A small OpenAI-compatible server that answers a configured share of quality items right.

Whether item X is answered right is a seeded coin flip per prompt, so the share is a true
probability (not an exact count) and two servers with different seeds disagree item by item.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from tests.quality.answers import right_answer, wrong_answer

from tokenrace.quality.suites import Item

FILLER = "the quick brown fox jumps over the lazy dog"


@dataclass
class Behaviour:
    share: float  # probability of a right answer
    seed: int = 0
    fail_every: int | None = None  # every n-th request (1-based) answers HTTP 500
    delay_s: float = 0.0  # before each answer
    answers: dict[str, tuple[str, str]] = field(default_factory=dict)  # prompt -> (right, wrong)
    requests: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)


def behaviour(items: Iterable[Item], share: float, seed: int = 0, fail_every: int | None = None) -> Behaviour:
    answers = {i.prompt: (right_answer(i.check), wrong_answer(i.check)) for i in items}
    return Behaviour(share=share, seed=seed, fail_every=fail_every, answers=answers)


def build_app(b: Behaviour) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "answerer", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        b.requests += 1
        b.bodies.append(body)
        b.authorizations.append(request.headers.get("Authorization"))
        if b.fail_every and b.requests % b.fail_every == 0:
            return web.json_response({"error": {"message": "programmed failure"}}, status=500)
        await asyncio.sleep(b.delay_s)
        prompt = body["messages"][-1]["content"]
        # A prompt that is not a quality item (bench's speed run) gets the same filler either way.
        right, wrong = b.answers.get(prompt, (FILLER, FILLER))
        answer = right if random.Random(f"{b.seed}/{prompt}").random() < b.share else wrong
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        pieces = [answer[i : i + 4] for i in range(0, len(answer), 4)] or [""]
        for piece in pieces:
            chunk = {"id": "x", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        end = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        usage = {"id": "x", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": len(pieces)}}
        await resp.write(f"data: {json.dumps(end)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


class AnswerServer:
    """The app on a free loopback port, served from a background thread."""

    def __init__(self, b: Behaviour) -> None:
        self.behaviour = b
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._runner: web.AppRunner | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))

    async def _start(self) -> None:
        self._runner = web.AppRunner(build_app(self.behaviour))
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/v1"

    def __enter__(self) -> AnswerServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
