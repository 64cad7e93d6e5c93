"""records.jsonl: one line per request, as `client.records.RequestRecord.to_json` writes it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenrace.model.base import _Model


class ServerTiming(_Model):
    """The engine's own clock for one response, as the server reported it: llama.cpp's `timings`
    (the only engine that sends them per response). Times in ms; keys a server adds are kept."""

    cache_n: int | None = None  # prompt tokens reused from the slot's cache
    prompt_n: int | None = None  # prompt tokens processed
    prompt_ms: float | None = None  # prompt processing, up to the first sampled token: the engine's TTFT
    prompt_per_token_ms: float | None = None
    prompt_per_second: float | None = None
    predicted_n: int | None = None  # tokens generated
    predicted_ms: float | None = None  # from the first generated token to the last
    predicted_per_token_ms: float | None = None
    predicted_per_second: float | None = None
    draft_n: int | None = None  # speculative decoding: tokens drafted
    draft_n_accepted: int | None = None  # of which the target model accepted


class RecordLine(_Model):
    """One request, as written to records.jsonl when it ends. Offsets in ms from the run's t0."""

    schema_version: int = 0
    seq: int
    phase: Literal["cold", "warmup", "measure", "probe"] = "measure"
    worker: int | None = None
    session_id: str | None = None
    turn: int | None = None
    intended_start_ms: float | None = None
    start_ms: float | None = None
    schedule_lag_ms: float | None = None
    client_prep_ms: float | None = None
    connect_ms: float | None = None
    new_connection: bool | None = None
    retried_stale_connection: bool = False
    ttft_ms: float | None = None
    ttfa_ms: float | None = None
    e2e_ms: float | None = None
    tpot_ms: float | None = None
    ttft_from_intended_ms: float | None = None
    e2e_from_intended_ms: float | None = None
    chunk_offsets_ms: list[float] = Field(default_factory=list)
    chunk_tokens: list[int] | None = None
    reasoning_chunks: int = 0
    prompt_tokens: int | None = None
    prompt_tokens_source: str | None = None
    cached_tokens: int | None = None
    cached_tokens_source: Literal["usage", "engine"] | None = None
    output_tokens: int | None = None
    output_tokens_source: str | None = None
    streamed_tokens: int | None = None  # counted on the client from the streamed text (or chunks)
    streamed_tokens_source: Literal["tokenizer", "chunks"] | None = None
    output_chars: int | None = None
    max_tokens: int | None = None
    content: str | None = None  # --content: natural, copy or random
    finish_reason: str | None = None
    finishes: int | None = None  # streamed events that carried a finish reason; None: not counted
    status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    retry_after_s: float | None = None
    response_id: str | None = None
    served_by: str | None = None  # the backend (a pool's instance) a tokenrace gateway said answered
    server_timing: ServerTiming | None = None
    images: int = 0
    image_bytes: int | None = 0
    image_pixels: int | None = 0
    tool_calls: int | None = None
    ttft_tool_ms: float | None = None
    schema_valid: bool | None = None
    inputs: int | None = None  # embeddings: texts embedded by the request
    documents: int | None = None  # rerank: documents ranked by the request
    embedding_dim: int | None = None  # embeddings: the length of the returned vectors
