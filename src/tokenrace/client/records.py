"""The per-request record: what one request did, measured on the client.

Times are integers from `time.perf_counter_ns()`; derived millisecond figures are computed once by
`finish()`. Undefined figures stay None (never 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from tokenrace.model.files import SCHEMA_VERSION

NS_PER_MS = 1_000_000


class PromptTokensDetails(TypedDict, total=False):
    cached_tokens: int  # prompt tokens served from the prefix cache


class CompletionTokensDetails(TypedDict, total=False):
    reasoning_tokens: int


class Usage(TypedDict, total=False):
    """A response's `usage` in OpenAI's chat shape (the other APIs' usage is reshaped to it), kept
    as the server sent it: readers check each count's type before trusting it."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None  # vLLM sends null unless asked for details
    completion_tokens_details: CompletionTokensDetails | None


class EngineTimings(TypedDict, total=False):
    """llama.cpp's per-response `timings` (the engine's own clock, in ms), kept as the server sent
    it and written so to records.jsonl, where model.records.ServerTiming reads it back."""

    cache_n: int  # prompt tokens reused from the slot's cache
    prompt_n: int  # prompt tokens processed
    prompt_ms: float  # prompt processing, up to the first sampled token
    prompt_per_token_ms: float | None
    prompt_per_second: float | None
    predicted_n: int  # tokens generated
    predicted_ms: float  # from the first generated token to the last
    predicted_per_token_ms: float | None
    predicted_per_second: float | None
    draft_n: int  # speculative decoding: tokens drafted
    draft_n_accepted: int


# The record's absolute perf_counter_ns() stamps taken where the request is sent (a worker's clock,
# when a worker sent it; `chunk_ns` holds more of them). `intended_start_ns` is the scheduler's own,
# and `connect_ns` and `client_prep_ns` are durations: neither moves when stamps change clocks.
CLOCK_STAMPS = (
    "begin_ns",
    "start_ns",
    "write_ns",
    "headers_ns",
    "first_token_ns",
    "first_answer_ns",
    "first_tool_ns",
    "end_ns",
)
SCHEDULER_STAMPS = ("intended_start_ns",)
DURATIONS_NS = ("connect_ns", "client_prep_ns")


@dataclass(slots=True)
class RequestRecord:
    seq: int
    phase: str = "measure"  # cold | warmup | measure
    intended_start_ns: int | None = None  # open loop: when the schedule wanted it sent
    begin_ns: int = 0  # the client began the request (building it, taking or opening a connection)
    start_ns: int = 0  # the send: its last byte handed to the kernel (never sent: = begin_ns)
    client_prep_ns: int | None = None  # begin -> send, less connect_ns; None when it was never sent
    write_ns: int | None = None  # just before the last write of the request's bytes (the send, unless it drained)
    connect_ns: int | None = None  # duration of opening a new connection, when one was opened
    headers_ns: int | None = None  # response headers received
    first_token_ns: int | None = None  # first chunk with generated content of any kind
    first_answer_ns: int | None = None  # first chunk with answer content (not reasoning)
    first_tool_ns: int | None = None  # first chunk with a tool call (its name or arguments)
    end_ns: int | None = None  # end of the stream (or of the body)
    chunk_ns: list[int] = field(default_factory=list)  # arrival of each content-bearing chunk
    chunk_chars: list[int] = field(default_factory=list)  # characters of content in each
    chunk_tokens: list[int] | None = None  # tokens in each content chunk, when known
    reasoning_chunks: int = 0
    text: str = ""  # generated answer + reasoning (kept in memory for token counting only)
    prompt_tokens: int | None = None
    prompt_tokens_source: str | None = None  # usage | tokenizer | estimate
    output_tokens: int | None = None
    output_tokens_source: str | None = None  # usage | tokenizer | chunks
    # Output tokens counted on the client from what was streamed, whatever usage says (the claim's
    # TEST06 check compares the two): the tokenizer's count of the text, else the content chunks.
    streamed_tokens: int | None = None
    streamed_tokens_source: str | None = None  # tokenizer | chunks
    cached_tokens: int | None = None  # prompt tokens the server served from its prefix cache
    cached_tokens_source: str | None = None  # usage | engine; None when the server did not say
    session_id: str | None = None  # multi-turn: the conversation this request belongs to
    turn: int | None = None  # multi-turn: 1 for a conversation's first request, 2 for the next, ...
    finish_reason: str | None = None
    finishes: int | None = None  # streamed events that carried a finish reason (chat, completions)
    status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    retry_after_s: float | None = None
    response_id: str | None = None
    served_by: str | None = None  # the instance a tokenrace gateway named (X-Tokenrace-Backend)
    usage: Usage | None = None
    server_timing: EngineTimings | None = None  # the engine's own clock, when it reports it
    new_connection: bool | None = None
    retried_stale_connection: bool = False  # closed keep-alive connections were replaced
    max_tokens: int | None = None
    cancel_after_chunks: int | None = None  # the client cancels the stream after this many content chunks
    worker: int | None = None  # the worker process that sent it, when the load was spread over several
    images: int = 0  # images the request carried
    image_bytes: int | None = 0  # their encoded bytes (None: one was a URL the client never read)
    image_pixels: int | None = 0  # their pixels, width x height summed
    tool_calls: int | None = None  # tool calls in the answer; None when no tools were offered
    schema_valid: bool | None = None  # the answer met the response schema; None when not checked
    inputs: int | None = None  # embeddings: texts embedded by this request
    documents: int | None = None  # rerank: documents ranked by this request
    embedding_dim: int | None = None  # embeddings: the length of the vectors the server returned
    content: str | None = None  # the kind of content asked for (--content), when one was
    # Called with the stamp of the first content chunk as it is read (MLPerf LoadGen's FirstTokenComplete);
    # never written to records.jsonl.
    on_first_token: Callable[[int], None] | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def fail(self, kind: str, message: str, status: int | None = None) -> None:
        # The first failure wins: a later one is usually a consequence.
        if self.error_kind is None:
            self.error_kind = kind
            self.error_message = message[:500]
        if status is not None:
            self.status = status

    def mark_sent(self, sent_ns: int) -> None:
        """The request's last byte reached the kernel at `sent_ns`: the start of TTFT and E2E."""
        self.start_ns = sent_ns
        self.client_prep_ns = sent_ns - self.begin_ns - (self.connect_ns or 0)

    def to_json(self, t0_ns: int) -> dict[str, Any]:
        """The records.jsonl line: offsets in ms from the run's t0, durations in ms."""
        d = derived(self)

        def ms(ns: int | None) -> float | None:
            return None if ns is None else round((ns - t0_ns) / NS_PER_MS, 4)

        return {
            "schema_version": SCHEMA_VERSION,  # the line's model is tokenrace.model.records.RecordLine
            "seq": self.seq,
            "phase": self.phase,
            "worker": self.worker,
            "session_id": self.session_id,
            "turn": self.turn,
            "intended_start_ms": ms(self.intended_start_ns),
            "start_ms": ms(self.start_ns),
            "schedule_lag_ms": d["schedule_lag_ms"],
            "client_prep_ms": _dur(self.client_prep_ns),
            "connect_ms": _dur(self.connect_ns),
            "new_connection": self.new_connection,
            "retried_stale_connection": self.retried_stale_connection,
            "ttft_ms": d["ttft_ms"],
            "ttfa_ms": d["ttfa_ms"],
            "e2e_ms": d["e2e_ms"],
            "tpot_ms": d["tpot_ms"],
            "ttft_from_intended_ms": d["ttft_from_intended_ms"],
            "e2e_from_intended_ms": d["e2e_from_intended_ms"],
            "chunk_offsets_ms": [round((t - self.start_ns) / NS_PER_MS, 4) for t in self.chunk_ns],
            "chunk_tokens": self.chunk_tokens,
            "reasoning_chunks": self.reasoning_chunks,
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_source": self.prompt_tokens_source,
            "cached_tokens": self.cached_tokens,
            "cached_tokens_source": self.cached_tokens_source,
            "output_tokens": self.output_tokens,
            "output_tokens_source": self.output_tokens_source,
            "streamed_tokens": self.streamed_tokens,
            "streamed_tokens_source": self.streamed_tokens_source,
            "output_chars": len(self.text),
            "max_tokens": self.max_tokens,
            "content": self.content,
            "finish_reason": self.finish_reason,
            "finishes": self.finishes,
            "status": self.status,
            "error_kind": self.error_kind,
            "error_message": self.error_message,
            "retry_after_s": self.retry_after_s,
            "response_id": self.response_id,
            "served_by": self.served_by,
            "server_timing": self.server_timing,
            "images": self.images,
            "image_bytes": self.image_bytes,
            "image_pixels": self.image_pixels,
            "tool_calls": self.tool_calls,
            "ttft_tool_ms": d["ttft_tool_ms"],
            "schema_valid": self.schema_valid,
            "inputs": self.inputs,
            "documents": self.documents,
            "embedding_dim": self.embedding_dim,
        }


def cached_tokens_of(usage: Any, timings: Any) -> tuple[int | None, str | None]:
    """(cached prompt tokens, source) from a response's `usage` and engine `timings`.

    `usage.prompt_tokens_details.cached_tokens` (OpenAI, vLLM, SGLang) is trusted first, as usage is
    for every token count; llama.cpp's `timings.cache_n` (prompt tokens reused from the slot's cache)
    second. A server that reports neither leaves the count unknown (None), never 0: vLLM sends
    `"prompt_tokens_details": null` unless started with --enable-prompt-tokens-details.
    """
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if _count(cached):
        return cached, "usage"
    cache_n = timings.get("cache_n") if isinstance(timings, dict) else None
    if _count(cache_n):
        return cache_n, "engine"
    return None, None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _dur(ns: int | None) -> float | None:
    return None if ns is None else round(ns / NS_PER_MS, 4)


def derived(r: RequestRecord) -> dict[str, float | None]:
    def span(a: int | None, b: int | None) -> float | None:
        return None if a is None or b is None else round((b - a) / NS_PER_MS, 4)

    tpot = None
    if r.output_tokens is not None and r.output_tokens >= 2 and len(r.chunk_ns) >= 2:
        tpot = round((r.chunk_ns[-1] - r.chunk_ns[0]) / NS_PER_MS / (r.output_tokens - 1), 4)
    return {
        "ttft_ms": span(r.start_ns, r.first_token_ns),
        "ttfa_ms": span(r.start_ns, r.first_answer_ns),
        "ttft_tool_ms": span(r.start_ns, r.first_tool_ns),
        "e2e_ms": span(r.start_ns, r.end_ns),
        "tpot_ms": tpot,
        "schedule_lag_ms": span(r.intended_start_ns, r.start_ns),
        "ttft_from_intended_ms": span(r.intended_start_ns, r.first_token_ns),
        "e2e_from_intended_ms": span(r.intended_start_ns, r.end_ns),
    }


def record_fields() -> list[str]:
    return list(asdict(RequestRecord(seq=0)).keys())
