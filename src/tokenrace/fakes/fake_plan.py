"""What to send and when: the stream plan and the pacer.

`plan_stream` turns one request into the sequence of `Step`s to send (pure,
testable), with the faults spliced in. `Pacer` gives each step an absolute deadline measured
from the request's arrival, so lateness in one send never shifts the next.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tokenrace.fakes.fake_config import FakeConfig
from tokenrace.fakes.fake_log import ChunkKind
from tokenrace.fakes.fake_openai import (
    MALFORMED_EVENT,
    Json,
    ResponseMeta,
    delta_chunk,
    engine_timings,
    sse,
    token_text,
    usage_block,
)
from tokenrace.fakes.fake_tools import responses_tool_events, responses_tool_items, tool_deltas
from tokenrace.fakes.fake_wire import named_sse, responses_object, responses_usage, wire_for

StepKind: TypeAlias = ChunkKind | Literal["stall", "abort"]


@dataclass(frozen=True)
class GenRequest:
    """One generation request, resolved: config, sizes, and the fault (if any)."""

    meta: ResponseMeta
    config: FakeConfig
    prompt_tokens: int
    output_tokens: int  # tokens to generate (0 for the "empty" fault)
    reasoning_tokens: int  # the first this-many of output_tokens are reasoning
    finish_reason: str
    include_usage: bool
    fault: str | None
    cached_tokens: int | None = None  # from the simulated prefix cache; None when it is off
    images: int = 0  # images the request carried (each adds config.image_ms to TTFT)
    tool_name: str | None = None  # answer with config.tool_calls calls of this function instead of text
    words: tuple[str, ...] | None = None  # the answer's words (config.answer); else "w{i}"

    @property
    def tool_calls(self) -> int:
        return self.config.tool_calls if self.tool_name is not None and self.output_tokens else 0

    @property
    def image_ms(self) -> float:
        """What the request's images add to TTFT."""
        return self.config.image_ms * self.images

    def text(self, first: int, count: int) -> str:
        """The text of generated tokens first .. first+count-1 (the answer's words after the reasoning)."""
        if self.words is None:
            return token_text(first, count)
        skip = self.reasoning_tokens
        return "".join(f"{self.words[i - skip]} " if i >= skip else f"w{i} " for i in range(first, first + count))

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens the simulated engine must prefill."""
        return self.prompt_tokens - (self.cached_tokens or 0)

    def texts(self) -> tuple[str, str]:
        """(reasoning, answer) text of the whole answer."""
        reasoning = token_text(0, self.reasoning_tokens)
        return reasoning, self.text(self.reasoning_tokens, self.output_tokens - self.reasoning_tokens)

    def usage(self) -> Json:
        reported = round(self.output_tokens * self.config.usage_output_scale)  # scaled: a server that misreports
        return usage_block(self.prompt_tokens, reported, self.reasoning_tokens, self.cached_tokens)

    def prompt_ms(self) -> float:
        """The programmed prefill time (load excluded): ttft_ms + per-token cost of the uncached tokens
        + the images' time."""
        return self.config.ttft_ms + self.config.prefill_ms_per_token * self.uncached_tokens + self.image_ms

    def timings(self) -> Json | None:
        """llama.cpp-style `timings`, when the config asks for them."""
        if not self.config.engine_timings:
            return None
        return engine_timings(
            self.cached_tokens, self.prompt_tokens, self.prompt_ms(), self.output_tokens, self.config.itl_ms
        )


@dataclass(frozen=True)
class Step:
    """One thing to do in a stream. `last_token`: send when that token is ready; None = now."""

    kind: StepKind
    data: bytes = b""
    tokens: int = 0
    last_token: int | None = None


def token_groups(start: int, count: int, per_chunk: int) -> list[tuple[int, int]]:
    """Split tokens start..start+count-1 into (first, size) groups; the last may be short."""
    return [(i, min(per_chunk, start + count - i)) for i in range(start, start + count, per_chunk)]


def plan_stream(req: GenRequest) -> Iterator[Step]:
    """All steps of a streaming response, faults included, in send order.

    A generator: each chunk's JSON is built just before it is due, so a request
    arriving does not stall other streams while its whole reply is serialized.
    """
    wire = wire_for(req.meta)
    for kind, data in wire.opening(req):
        yield Step(kind, data)
    if req.tool_calls:
        yield from _tool_steps(req)
        return
    groups = _groups(req)
    after = req.config.fault_after_chunks
    # Cutting before the last group guarantees the client never sees a finish_reason.
    cut = min(after, len(groups) - 1) if req.fault in ("truncate", "disconnect_midstream") else None
    splice_at = min(after, len(groups)) if req.fault in ("malformed", "stall") else None
    for i, group in enumerate(groups):
        if i == splice_at:
            yield _fault_step(req.fault)
        if i == cut:
            if req.fault == "disconnect_midstream":
                yield Step("abort")
            return
        yield _token_step(req, group, is_last=i == len(groups) - 1)
    if splice_at == len(groups):
        yield _fault_step(req.fault)
    for kind, data in wire.closing(req):
        yield Step(kind, data)


def _tool_steps(req: GenRequest) -> Iterator[Step]:
    """A tool-calling answer: one chunk per argument token, then the API's closing events."""
    assert req.tool_name is not None
    if req.meta.endpoint == "responses":
        for piece, token in responses_tool_events(req.tool_name, req.output_tokens, req.tool_calls):
            yield Step("tool", b"".join(named_sse(e) for e in piece["events"]), 1, token)
        output = responses_tool_items(req.tool_name, req.output_tokens, req.tool_calls)
        final = responses_object(req, "completed", output, responses_usage(req))
        yield Step("done", named_sse({"type": "response.completed", "response": final}))
        return
    last = req.output_tokens - 1
    for delta, token in tool_deltas(req.tool_name, req.output_tokens, req.tool_calls):
        chunk = delta_chunk(req.meta, delta, "tool_calls" if token == last else None)
        yield Step("tool", sse(chunk), 1, token)
    for kind, data in wire_for(req.meta).closing(req):
        yield Step(kind, data)


def _groups(req: GenRequest) -> list[tuple[ChunkKind, int, int]]:
    """(kind, first token, size) per token chunk; a chunk never mixes reasoning and answer."""
    per_chunk = req.config.tokens_per_chunk
    reasoning = token_groups(0, req.reasoning_tokens, per_chunk)
    answer = token_groups(req.reasoning_tokens, req.output_tokens - req.reasoning_tokens, per_chunk)
    groups: list[tuple[ChunkKind, int, int]] = [("reasoning", f, n) for f, n in reasoning]
    groups += [("content", f, n) for f, n in answer]
    # No tokens at all (the "empty" fault): still one finish chunk, carrying nothing.
    return groups or [("content", 0, 0)]


def _token_step(req: GenRequest, group: tuple[ChunkKind, int, int], is_last: bool) -> Step:
    kind, first, size = group
    data = wire_for(req.meta).token(req, kind, first, req.text(first, size), is_last)
    return Step(kind, data, size, first + max(size, 1) - 1)


def _fault_step(fault: str | None) -> Step:
    if fault == "malformed":
        return Step("malformed", MALFORMED_EVENT)
    return Step("stall")


def ms_to_ns(ms: float) -> int:
    return round(ms * 1_000_000)


class Pacer:
    """Absolute send deadlines: token i is ready at arrival + ttft + i*itl (+ load, jitter).

    ttft is ttft_ms + prefill_ms_per_token x `uncached_tokens` (the prompt tokens the
    prefix cache did not cover). Each deadline is derived from the previous *deadline*,
    never from when the server actually woke up, so oversleeping once does not drift the rest.
    """

    def __init__(
        self,
        arrival_ns: int,
        config: FakeConfig,
        rng: random.Random,
        others: int,
        uncached_tokens: int = 0,
        extra_ms: float = 0.0,
    ) -> None:
        self._config = config
        self._rng = rng
        first = config.ttft_ms
        if config.slow_rate > 0 and rng.random() < config.slow_rate:  # drawn only when asked: other draws stay
            first = config.slow_ttft_ms
        ttft = first + config.prefill_ms_per_token * uncached_tokens + config.load_ttft_ms * others + extra_ms
        self._grid_ns = arrival_ns + ms_to_ns(ttft)  # when token `_grid_token` is ready
        self._grid_token = 0
        self._last_deadline = arrival_ns

    def deadline(self, token_index: int, others_now: int) -> int:
        """Deadline of a step that waits for `token_index`; never earlier than the last one."""
        gap = ms_to_ns(self._config.itl_ms + self._config.load_itl_ms * others_now)
        if token_index > self._grid_token:
            self._grid_ns += gap * (token_index - self._grid_token)
            self._grid_token = token_index
        deadline = max(self._grid_ns + self._jitter_ns(), self._last_deadline)
        self._last_deadline = deadline
        return deadline

    def shift(self, ns: int) -> None:
        """Push every later deadline back by `ns` (a stall)."""
        self._grid_ns += ns
        self._last_deadline += ns

    def _jitter_ns(self) -> int:
        jitter = self._config.jitter_ms
        return ms_to_ns(self._rng.uniform(-jitter, jitter)) if jitter else 0


async def sleep_until(deadline_ns: int, spin_ns: int) -> None:
    """Sleep until perf_counter_ns() >= deadline_ns.

    asyncio timers fire up to ~1 ms late (epoll/libuv have ms resolution), so
    sleep until `spin_ns` before the deadline and then yield to the loop in a
    tight loop; other streams keep running while we spin.
    """
    remaining = deadline_ns - time.perf_counter_ns()
    if remaining > spin_ns:
        await asyncio.sleep((remaining - spin_ns) / 1e9)
    while time.perf_counter_ns() < deadline_ns:
        await asyncio.sleep(0)
