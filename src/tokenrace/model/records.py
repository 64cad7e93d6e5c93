"""One request: the record the client fills while it runs, and, dumped, one line of records.jsonl.

While the request runs the client stamps `time.perf_counter_ns()` into the `*_ns` fields (integers
of the process that sent it) and appends one stamp per content chunk; none of them is written.
When the request has ended, `settle(t0_ns)` computes the line's millisecond figures from them once
(offsets from the run's t0, spans between two stamps); the run store settles each record as it
writes it. A record read back from records.jsonl has the figures and no stamps. Undefined figures
are None, never 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import ConfigDict, Field
from typing_extensions import TypedDict

from tokenrace.model.base import SCHEMA_VERSION, _Model

NS_PER_MS = 1_000_000
Phase = Literal["cold", "warmup", "measure", "probe"]
CacheSource = Literal["usage", "engine"]


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


class ServerTiming(TypedDict, total=False):
    """The engine's own clock for one response, as the server sent it: llama.cpp's `timings` (the
    only engine that sends them per response), written to records.jsonl as it came, keys a server
    adds included. Times in ms; every key may be missing or null."""

    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]

    cache_n: int | None  # prompt tokens reused from the slot's cache
    prompt_n: int | None  # prompt tokens processed
    prompt_ms: float | None  # prompt processing, up to the first sampled token: the engine's TTFT
    prompt_per_token_ms: float | None
    prompt_per_second: float | None
    predicted_n: int | None  # tokens generated
    predicted_ms: float | None  # from the first generated token to the last
    predicted_per_token_ms: float | None
    predicted_per_second: float | None
    draft_n: int | None  # speculative decoding: tokens drafted
    draft_n_accepted: int | None  # of which the target model accepted


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


class RequestRecord(_Model):
    """One request. The fields up to `embedding_dim` are the records.jsonl line, in its order
    (offsets in ms from the run's t0, durations in ms); the rest are the client's live state."""

    schema_version: int = 0  # files written before it existed read as 0; settle() sets the current one
    seq: int
    phase: Phase = "measure"
    worker: int | None = None  # the worker process that sent it, when the load was spread over several
    session_id: str | None = None  # multi-turn: the conversation this request belongs to
    turn: int | None = None  # multi-turn: 1 for a conversation's first request, 2 for the next, ...
    intended_start_ms: float | None = None  # open loop: when the schedule wanted it sent
    start_ms: float | None = None  # the send
    schedule_lag_ms: float | None = None  # intended start -> the send
    client_prep_ms: float | None = None  # begin -> send, less connect_ms; None when it was never sent
    connect_ms: float | None = None  # opening a new connection, when one was opened
    new_connection: bool | None = None
    retried_stale_connection: bool = False  # closed keep-alive connections were replaced
    ttft_ms: float | None = None  # the send -> the first chunk with generated content of any kind
    ttfa_ms: float | None = None  # the send -> the first chunk with answer content (not reasoning)
    e2e_ms: float | None = None  # the send -> the end of the stream (or of the body)
    tpot_ms: float | None = None  # first content chunk -> last, per output token after the first
    ttft_from_intended_ms: float | None = None
    e2e_from_intended_ms: float | None = None
    chunk_offsets_ms: list[float] = Field(default_factory=list)  # each content chunk, from the send
    chunk_tokens: list[int] | None = None  # tokens in each content chunk, when known
    reasoning_chunks: int = 0
    prompt_tokens: int | None = None
    prompt_tokens_source: str | None = None  # usage | tokenizer | estimate
    cached_tokens: int | None = None  # prompt tokens the server served from its prefix cache
    cached_tokens_source: CacheSource | None = None  # None when the server did not say
    output_tokens: int | None = None
    output_tokens_source: str | None = None  # usage | tokenizer | chunks
    # Output tokens counted on the client from what was streamed, whatever usage says (the claim's
    # TEST06 check compares the two): the tokenizer's count of the text, else the content chunks.
    streamed_tokens: int | None = None
    streamed_tokens_source: Literal["tokenizer", "chunks"] | None = None
    output_chars: int | None = None
    max_tokens: int | None = None
    content: str | None = None  # --content: natural, copy or random
    finish_reason: str | None = None
    finishes: int | None = None  # streamed events that carried a finish reason (chat, completions); TEST06
    status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    retry_after_s: float | None = None
    response_id: str | None = None
    served_by: str | None = None  # the backend (a pool's instance) a tokenrace gateway said answered
    server_timing: ServerTiming | None = None  # the engine's own clock, when it reports it
    images: int = 0  # images the request carried
    image_bytes: int | None = 0  # their encoded bytes (None: one was a URL the client never read)
    image_pixels: int | None = 0  # their pixels, width x height summed
    tool_calls: int | None = None  # tool calls in the answer; None when no tools were offered
    ttft_tool_ms: float | None = None  # the send -> the first chunk with a tool call
    schema_valid: bool | None = None  # the answer met the response schema; None when not checked
    inputs: int | None = None  # embeddings: texts embedded by the request
    documents: int | None = None  # rerank: documents ranked by the request
    embedding_dim: int | None = None  # embeddings: the length of the returned vectors

    # The client's live state, not written: perf_counter_ns() stamps and what the figures come from.
    # open loop: the scheduler's time for the send
    intended_start_ns: int | None = Field(default=None, exclude=True)
    # the client began the request (building it, taking or opening a connection)
    begin_ns: int = Field(default=0, exclude=True)
    # the send: its last byte handed to the kernel (never sent: = begin_ns)
    start_ns: int = Field(default=0, exclude=True)
    # begin -> send, less connect_ns; None when it was never sent
    client_prep_ns: int | None = Field(default=None, exclude=True)
    # just before the last write of the request's bytes (the send, unless it drained)
    write_ns: int | None = Field(default=None, exclude=True)
    # duration of opening a new connection, when one was opened
    connect_ns: int | None = Field(default=None, exclude=True)
    headers_ns: int | None = Field(default=None, exclude=True)  # response headers received
    # first chunk with generated content of any kind; with answer content (not reasoning); with a tool call
    first_token_ns: int | None = Field(default=None, exclude=True)
    first_answer_ns: int | None = Field(default=None, exclude=True)
    first_tool_ns: int | None = Field(default=None, exclude=True)
    end_ns: int | None = Field(default=None, exclude=True)  # end of the stream (or of the body)
    chunk_ns: list[int] = Field(default_factory=list, exclude=True)  # arrival of each content-bearing chunk
    chunk_chars: list[int] = Field(default_factory=list, exclude=True)  # characters of content in each
    text: str = Field(default="", exclude=True)  # answer + reasoning, held for token counting only
    usage: Usage | None = Field(default=None, exclude=True)
    # the client cancels the stream after this many content chunks
    cancel_after_chunks: int | None = Field(default=None, exclude=True)
    # called with the stamp of the first content chunk as it is read (MLPerf LoadGen's FirstTokenComplete)
    on_first_token: Callable[[int], None] | None = Field(default=None, exclude=True)

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

    def settle(self, t0_ns: int) -> None:
        """The line's figures, from the stamps of a request that has ended (and its token counts):
        offsets in ms from `t0_ns` (the run's t0), spans in ms. Computed once, by whoever hands the
        record on as finished (the run store as it writes it); a record read back has no stamps."""
        start = self.start_ns
        intended = self.intended_start_ns
        tpot = None
        n, chunks = self.output_tokens, self.chunk_ns
        if n is not None and n >= 2 and len(chunks) >= 2:
            tpot = round((chunks[-1] - chunks[0]) / NS_PER_MS / (n - 1), 4)
        # One update of the instance's fields, not a pydantic __setattr__ per figure.
        self.__dict__.update(
            schema_version=SCHEMA_VERSION,
            intended_start_ms=_span(t0_ns, intended),
            start_ms=_span(t0_ns, start),
            schedule_lag_ms=_span(intended, start),
            client_prep_ms=_ms(self.client_prep_ns),
            connect_ms=_ms(self.connect_ns),
            ttft_ms=_span(start, self.first_token_ns),
            ttfa_ms=_span(start, self.first_answer_ns),
            e2e_ms=_span(start, self.end_ns),
            tpot_ms=tpot,
            ttft_from_intended_ms=_span(intended, self.first_token_ns),
            e2e_from_intended_ms=_span(intended, self.end_ns),
            chunk_offsets_ms=[round((t - start) / NS_PER_MS, 4) for t in chunks],
            output_chars=len(self.text),
            ttft_tool_ms=_span(start, self.first_tool_ns),
        )


def _span(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None else round((b - a) / NS_PER_MS, 4)


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / NS_PER_MS, 4)
