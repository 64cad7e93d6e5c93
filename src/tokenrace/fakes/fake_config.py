"""FakeConfig: the programmed behaviour of the fake OpenAI-compatible server.

One frozen pydantic model holds the server-wide settings; a request may carry
`"fake": {...}` in its body (or an `x-fake-fault` header) to override any
field for that request only, via `merge_overrides`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tokenrace.fakes.fake_cache import BlockUnit

FaultKind: TypeAlias = Literal[
    "500",
    "429",
    "truncate",
    "malformed",
    "stall",
    "refuse",
    "empty",
    "disconnect_midstream",
]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)

UsageMode: TypeAlias = Literal["auto", "always", "never"]
ApiKind: TypeAlias = Literal["chat", "completions", "responses", "messages", "embeddings", "rerank", "tei_rerank"]


class FakeConfig(BaseModel):
    """Timing, shape and fault settings. Times are in milliseconds unless named `_s`."""

    # extra="forbid": a typo in a config or a per-request override must fail
    # loudly, or a test would silently measure the default behaviour.
    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float = Field(default=50.0, ge=0)
    itl_ms: float = Field(default=10.0, ge=0)
    jitter_ms: float = Field(default=0.0, ge=0)
    # A random tail: this share of requests, drawn at random, has `slow_ttft_ms` as its TTFT instead
    # of `ttft_ms` (a server whose p99 is slow while its median is fast, whatever the load).
    slow_rate: float = Field(default=0.0, ge=0, le=1)
    slow_ttft_ms: float = Field(default=0.0, ge=0)
    seed: int = 0
    output_tokens: int = Field(default=32, ge=1)
    output_tokens_std: float = Field(default=0.0, ge=0)
    tokens_per_chunk: int = Field(default=1, ge=1)
    role_chunk: bool = True
    usage: UsageMode = "auto"
    reasoning_tokens: int = Field(default=0, ge=0)
    models: list[str] = Field(default_factory=lambda: ["fake-model"], min_length=1)
    api_key: str | None = None
    load_ttft_ms: float = Field(default=0.0, ge=0)
    load_itl_ms: float = Field(default=0.0, ge=0)
    fault: FaultKind | None = None
    fault_rate: float = Field(default=1.0, ge=0, le=1)
    fault_every: int | None = Field(default=None, ge=1)
    # Content chunks sent before truncate/malformed/stall/disconnect_midstream act.
    fault_after_chunks: int = Field(default=2, ge=0)
    stall_s: float = Field(default=30.0, ge=0)
    # The last `spin_ms` before a deadline are spent yielding in a loop instead
    # of in asyncio.sleep, whose timers only have ~1 ms resolution. 0 = pure sleep
    # (less CPU, sends up to ~1 ms late). FakeServerThread defaults it to 0.
    spin_ms: float = Field(default=1.0, ge=0)
    metrics_text_path: str | None = None
    log_path: str | None = None
    # Simulated prefix cache (fake_cache.py). Off by default: the server then reports no
    # cached tokens at all, as an engine without prefix caching does. On, usage carries
    # prompt_tokens_details.cached_tokens. Each block geometry (size, unit, capacity) has its
    # own cache, shared by all requests that use it.
    prefix_cache: bool = False
    cache_block_size: int = Field(default=16, ge=1)
    cache_block_unit: BlockUnit = "tokens"
    cache_capacity_blocks: int | None = Field(default=None, ge=1)
    # TTFT = ttft_ms + prefill_ms_per_token x uncached prompt tokens (+ load): a cache hit
    # shortens it. Without the cache every prompt token is uncached.
    prefill_ms_per_token: float = Field(default=0.0, ge=0)
    # llama.cpp's per-response `timings` (cache_n, prompt_n, prompt_ms, predicted_n, predicted_ms)
    # from the programmed figures, on the last chunk of a stream or in the body.
    engine_timings: bool = False
    # Generation slots, as an engine's batch size: with `slots` requests generating, a new one
    # waits in a queue (its TTFT includes the wait) until one ends. None: no limit.
    slots: int | None = Field(default=None, ge=1)
    # The request header whose value the send log records as `session_id`.
    session_header: str = Field(default="X-Session-ID", min_length=1)
    # Images (fake_images.py): each image a request carries is decoded and adds this much to TTFT,
    # as a vision encoder would; `refuse_images` answers 400, as a text-only model's server does.
    image_ms: float = Field(default=0.0, ge=0)
    refuse_images: bool = False
    # A request that offers `tools` is answered with this many tool calls (their arguments streamed
    # one token per chunk, finish_reason "tool_calls") instead of text; 0 answers with text.
    tool_calls: int = Field(default=0, ge=0)
    # The answer's text instead of "w0 w1 ...", e.g. a JSON document: one token per
    # whitespace-separated word, so output_tokens is its word count (max_tokens may cut it).
    answer: str | None = None
    # Embeddings and rerank answer in one body, sent at arrival + ttft_ms (+ prefill_ms_per_token x
    # input tokens, + load) + this per input embedded / per document ranked.
    embedding_ms_per_input: float = Field(default=0.0, ge=0)
    rerank_ms_per_document: float = Field(default=0.0, ge=0)
    embedding_dim: int = Field(default=8, ge=1)
    # The APIs this server answers; any other answers 404 as a server without that route does.
    # None: all of them.
    apis: list[ApiKind] | None = None
    # Speculative decoding (fake_spec.py): each step drafts `spec_tokens` tokens (0: off), each
    # accepted with probability `spec_acceptance` until the first rejection; /metrics then serves
    # vLLM's spec-decode counters, split over `spec_engines` data-parallel engines.
    spec_tokens: int = Field(default=0, ge=0)
    spec_acceptance: float = Field(default=0.7, ge=0, le=1)
    spec_engines: int = Field(default=1, ge=1)
    # Settings for requests whose prompt contains a key, e.g. {"verbatim": {"itl_ms": 4,
    # "spec_acceptance": 0.95}}: a server whose speed depends on what it is asked to write.
    when_prompt_contains: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # A DCGM exporter page at /dcgm/metrics (fake_dcgm.py): one GPU per power, in W (empty: none).
    # `dcgm_energy` False leaves the energy counter out; `dcgm_restart_after` scrapes, the counters
    # begin again near 0, as after an exporter restart.
    dcgm_power_w: list[float] = Field(default_factory=list)
    dcgm_energy: bool = True
    dcgm_restart_after: int | None = Field(default=None, ge=1)
    # Misbehaviour that MLPerf's compliance tests catch (docs/claim.md, "Compliance"): usage reports
    # `usage_output_scale` x the tokens streamed (TEST06); a chat or completions stream ends with
    # `finishes` events carrying its finish_reason (TEST06: one is honest); with `honours_ignore_eos`
    # False, a request asking `ignore_eos` still stops at its natural length (TEST09); a prompt the
    # server has answered before is answered `repeat_speedup` times faster, TTFT and ITL alike, as a
    # cache of answers would (TEST04).
    usage_output_scale: float = Field(default=1.0, ge=0)
    finishes: int = Field(default=1, ge=1)
    honours_ignore_eos: bool = True
    repeat_speedup: float = Field(default=1.0, ge=1)

    @field_validator("when_prompt_contains")
    @classmethod
    def _known_settings(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        # A typo in a content rule would otherwise surface only when a prompt matched it.
        for key, settings in value.items():
            unknown = set(settings) - set(cls.model_fields) | ({"when_prompt_contains"} & set(settings))
            if unknown:
                raise ValueError(f"when_prompt_contains[{key!r}]: not settings of a request: {sorted(unknown)}")
        return value

    @field_validator("fault", mode="before")
    @classmethod
    def _fault_as_text(cls, value: Any) -> Any:
        # JSON/YAML users naturally write {"fault": 500}; accept the number.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if value == "none":
            return None
        return value


def merge_overrides(base: FakeConfig, override: Mapping[str, Any]) -> FakeConfig:
    """Return `base` with `override` applied (validated). Raises pydantic.ValidationError.

    A fault asked for by one request is meant for that request: unless the
    override also sets them, the server-wide fault_rate/fault_every do not apply.
    """
    if not override:
        return base
    update = dict(override)
    if update.get("fault") is not None:
        update.setdefault("fault_rate", 1.0)
        update.setdefault("fault_every", None)
    return FakeConfig.model_validate({**base.model_dump(), **update})


def as_config(config: FakeConfig | Mapping[str, Any] | None) -> FakeConfig:
    """Accept a FakeConfig, a plain mapping of its fields, or None (defaults)."""
    if config is None:
        return FakeConfig()
    if isinstance(config, FakeConfig):
        return config
    return FakeConfig.model_validate(dict(config))
