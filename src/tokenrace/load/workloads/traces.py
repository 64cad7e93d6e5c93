"""Trace replay: timestamped request traces, their send offsets, and prompts of the traced sizes.

Formats (one request per line; a header line for CSV):

- `mooncake`: JSONL of `{"timestamp": ms, "input_length": tokens, "output_length": tokens,
  "hash_ids": [int, ...]}`. Each hash id names one block of `block_tokens` prompt tokens (512 in the
  published Mooncake traces); two requests with the same hash id at the same position share the
  whole prefix up to and including that block. The last block may be partial.
- `azure`: the Azure LLM inference trace CSV, columns `TIMESTAMP` (e.g. `2023-11-16 18:15:46.6805900`),
  `ContextTokens`, `GeneratedTokens`. No prefix information: every prompt is unique.
- `jsonl`: this project's plain form, `{"timestamp_s": s, "input_tokens": n, "output_tokens": n}`, with
  optional `"hash_ids"` (as Mooncake) or `"prompt"` (sent as is; `input_tokens` may then be left out).

Offsets are measured from the trace's earliest request, so the first request is sent at 0 (as the
open-loop schedules are); lines out of time order are sorted. `Trace.offsets(speed)` divides them by
the speed factor. Prompts come from `TracePromptBuilder`, deterministic given (seed, nonce).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar, get_args

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokenrace.client.openai import Prompt
from tokenrace.errors import UsageError
from tokenrace.load.tokens import Tokenizer
from tokenrace.load.workloads.text import SizedText, approximate_tokens, fit_ids, sized_text

TraceFormat: TypeAlias = Literal["mooncake", "azure", "jsonl"]
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)
DEFAULT_BLOCK_TOKENS = 512  # the Mooncake traces' block size


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One traced request. `offset_s`: trace time since the earliest request; `line`: where it was read."""

    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    prompt: str | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class Trace:
    source: str
    format: TraceFormat
    requests: tuple[TraceRequest, ...]

    @property
    def duration_s(self) -> float:
        """Trace time from the first request to the last."""
        return self.requests[-1].offset_s if self.requests else 0.0

    def offsets(self, speed: float = 1.0) -> list[float]:
        """Send offsets in seconds at `speed` (2 replays twice as fast, 0.5 half as fast)."""
        check_speed(speed)
        return [r.offset_s / speed for r in self.requests]


def check_speed(speed: float) -> None:
    if not (speed > 0 and math.isfinite(speed)):
        raise UsageError(f"trace speed must be a positive number, got {speed}")


def load_trace(path: str | Path, fmt: str) -> Trace:
    """Read a trace file of format `fmt` (mooncake, azure or jsonl). Raises UsageError naming the line."""
    p = Path(path)
    if fmt not in TRACE_FORMATS:
        raise UsageError(f"trace format must be one of {', '.join(TRACE_FORMATS)}, got {fmt!r}")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {p}: {exc.strerror}") from None
    lines = text.splitlines()
    if fmt == "mooncake":
        return parse_mooncake(lines, str(p))
    if fmt == "azure":
        return parse_azure(lines, str(p))
    return parse_jsonl(lines, str(p))


class _Row(BaseModel):
    # Strict: a count written as "9" or true is refused, not converted.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class MooncakeRow(_Row):
    """One line of a Mooncake trace."""

    timestamp: float = Field(ge=0, allow_inf_nan=False)  # ms
    input_length: int  # tokens
    output_length: int  # tokens
    hash_ids: list[int] = Field(default_factory=list)  # one per block of the prompt


class PlainRow(_Row):
    """One line of this project's plain JSONL trace."""

    prompt: str | None = None  # sent as is
    input_tokens: int | None = None  # may be left out when the prompt is given
    hash_ids: list[int] = Field(default_factory=list)
    timestamp_s: float = Field(ge=0, allow_inf_nan=False)
    output_tokens: int


def parse_mooncake(lines: Iterable[str], source: str) -> Trace:
    rows = []
    for lineno, row in _rows(lines, source, MooncakeRow):
        where = f"{source}:{lineno}"
        rows.append(
            _request(
                where,
                lineno,
                row.timestamp / 1000.0,
                row.input_length,
                row.output_length,
                tuple(row.hash_ids),
            )
        )
    return _trace(source, "mooncake", rows)


def parse_jsonl(lines: Iterable[str], source: str) -> Trace:
    rows = []
    for lineno, row in _rows(lines, source, PlainRow):
        where = f"{source}:{lineno}"
        if row.input_tokens is not None:
            input_tokens = row.input_tokens
        elif row.prompt is not None:
            input_tokens = max(1, approximate_tokens(row.prompt))
        else:
            raise UsageError(f'{where}: "input_tokens" must be {TOKENS}, got None')
        if row.prompt is not None and row.hash_ids:
            raise UsageError(f'{where}: give "prompt" or "hash_ids", not both')
        rows.append(
            _request(where, lineno, row.timestamp_s, input_tokens, row.output_tokens, tuple(row.hash_ids), row.prompt)
        )
    return _trace(source, "jsonl", rows)


AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def parse_azure(lines: Sequence[str], source: str) -> Trace:
    reader = csv.reader(lines)
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in AZURE_COLUMNS if c not in header]
    if missing:
        raise UsageError(
            f"{source}:1: the header lacks {', '.join(missing)} (an Azure LLM inference trace has {', '.join(AZURE_COLUMNS)})"
        )
    col = {name: header.index(name) for name in AZURE_COLUMNS}
    rows: list[tuple[datetime, int, int, int]] = []
    for lineno, row in enumerate(reader, 2):
        if not row or not any(cell.strip() for cell in row):
            continue
        where = f"{source}:{lineno}"
        if len(row) < len(header):
            raise UsageError(f"{where}: {len(row)} columns, the header has {len(header)}")
        stamp = _azure_time(row[col["TIMESTAMP"]], where)
        context = _cell_int(row[col["ContextTokens"]], "ContextTokens", where)
        generated = _cell_int(row[col["GeneratedTokens"]], "GeneratedTokens", where)
        rows.append((stamp, context, generated, lineno))
    if not rows:
        raise UsageError(f"{source}: no requests")
    t0 = min(r[0] for r in rows)
    requests = [_request(f"{source}:{n}", n, (t - t0).total_seconds(), ctx, gen) for t, ctx, gen, n in rows]
    return _trace(source, "azure", requests)


Row = TypeVar("Row", bound=_Row)
TOKENS = "a whole number of tokens"


def _rows(lines: Iterable[str], source: str, model: type[Row]) -> Iterable[tuple[int, Row]]:
    """Each JSON line read into `model`; UsageError naming the line and what is wrong with it."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            obj: Any = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"{where}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise UsageError(f"{where}: expected a JSON object")
        try:
            row = model.model_validate(obj)
        except ValidationError as exc:
            raise UsageError(f"{where}: {_problem(exc)}") from None
        yield lineno, row


def _problem(exc: ValidationError) -> str:
    """What is wrong with a trace line, for its first bad field."""
    error = exc.errors()[0]
    key = str(error["loc"][0])
    if key == "hash_ids":
        return '"hash_ids" must be a list of integers'
    if key == "prompt":
        return '"prompt" must be a string'
    value = None if error["type"] == "missing" else error["input"]
    what = "a number >= 0" if key.startswith("timestamp") else TOKENS
    return f'"{key}" must be {what}, got {value!r}'


def _request(
    where: str,
    lineno: int,
    time_s: float,
    input_tokens: int,
    output_tokens: int,
    hash_ids: tuple[int, ...] = (),
    prompt: str | None = None,
) -> TraceRequest:
    if input_tokens < 1 and prompt is None:
        raise UsageError(f"{where}: the input length must be at least 1 token, got {input_tokens}")
    if output_tokens < 1:
        raise UsageError(f"{where}: the output length must be at least 1 token, got {output_tokens}")
    return TraceRequest(time_s, input_tokens, output_tokens, hash_ids, prompt, lineno)


def _trace(source: str, fmt: TraceFormat, rows: list[TraceRequest]) -> Trace:
    if not rows:
        raise UsageError(f"{source}: no requests")
    rows.sort(key=lambda r: r.offset_s)  # stable: equal times keep file order
    t0 = rows[0].offset_s
    shifted = tuple(
        TraceRequest(r.offset_s - t0, r.input_tokens, r.output_tokens, r.hash_ids, r.prompt, r.line) for r in rows
    )
    return Trace(source, fmt, shifted)


def _cell_int(cell: str, column: str, where: str) -> int:
    try:
        return int(cell.strip())
    except ValueError:
        raise UsageError(f"{where}: {column} must be a whole number of tokens, got {cell!r}") from None


def _azure_time(cell: str, where: str) -> datetime:
    try:
        stamp = datetime.fromisoformat(cell.strip())
    except ValueError:
        raise UsageError(
            f"{where}: TIMESTAMP {cell!r} is not a date and time (e.g. 2023-11-16 18:15:46.6805900)"
        ) from None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


# --- prompts ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TracePrompt:
    """The prompt for one traced request; `tokens`: its measured length (None without a tokenizer)."""

    prompt: Prompt
    target: int
    tokens: int | None


@dataclass
class TracePromptBuilder:
    """Prompts of the traced lengths, with shared prefix blocks where the trace has shared hash ids.

    Block `h` is the same text wherever hash id `h` appears (drawn from (seed, h)); a partial last
    block is the first tokens of its block. The first block of every prompt opens with the run's
    nonce, so that nothing a previous run left in the server's cache is hit: sharing happens
    *within* the run, as the trace says. A request without hash ids gets a text of its own,
    opening with the nonce and its index. With a tokenizer each block is exact and the whole prompt
    is measured (block joins may merge a token or two; `TracePrompt.tokens` says); without one,
    lengths are one word per token.
    """

    trace: Trace
    tokenizer: Tokenizer | None
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    seed: int = 0
    nonce: str = ""
    _blocks: dict[tuple[int, bool], tuple[str, list[int] | None]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise UsageError(f"trace block size must be at least 1 token, got {self.block_tokens}")

    async def build(self, index: int) -> TracePrompt:
        """The prompt of request `index` (max_tokens from the trace)."""
        req = self.trace.requests[index]
        if req.prompt is not None:
            text = req.prompt
        elif req.hash_ids:
            text = await self._from_blocks(req)
        else:
            text = (
                await self._unique(index, req.input_tokens, f"[{self.nonce}-{index}]" if self.nonce else f"[{index}]")
            ).text
        measured = len(await self.tokenizer.encode(text)) if self.tokenizer is not None else None
        target = req.input_tokens
        return TracePrompt(Prompt(text=text, max_tokens=req.output_tokens, label=f"trace:{req.line}"), target, measured)

    async def build_all(self) -> list[TracePrompt]:
        return [await self.build(i) for i in range(len(self.trace.requests))]

    async def _from_blocks(self, req: TraceRequest) -> str:
        parts: list[str] = []
        remaining = req.input_tokens
        for position, hash_id in enumerate(req.hash_ids):
            if remaining <= 0:
                break
            take = min(self.block_tokens, remaining)
            parts.append(await self._block_text(hash_id, position == 0, take))
            remaining -= take
        if remaining > 0:  # a trace line with fewer blocks than its length: the rest is its own
            tail = await self._unique(req.line, remaining, f"[{self.nonce}-tail-{req.line}]")
            parts.append(tail.text)
        return " ".join(parts)

    async def _block_text(self, hash_id: int, first: bool, take: int) -> str:
        # A hash id seen first and later elsewhere still names one block; keying on `first` too
        # keeps the nonce only where a prompt begins.
        key = (hash_id, first)
        if key not in self._blocks:
            rng = np.random.default_rng([self.seed, 0xB10C, hash_id & 0xFFFFFFFF, hash_id >> 32 & 0xFFFFFFFF])
            lead = f"[{self.nonce}]" if first and self.nonce else ""
            made = await sized_text(self.block_tokens, rng, self.tokenizer, lead=lead)
            ids = await self.tokenizer.encode(made.text) if self.tokenizer is not None else None
            self._blocks[key] = (made.text, ids)
        text, ids = self._blocks[key]
        if take >= self.block_tokens:
            return text
        if ids is None or self.tokenizer is None:
            return " ".join(text.split()[:take])
        return (await fit_ids(ids[:take], take, self.tokenizer)).text

    async def _unique(self, salt: int, tokens: int, lead: str) -> SizedText:
        rng = np.random.default_rng([self.seed, 0x0A1E, salt])
        return await sized_text(tokens, rng, self.tokenizer, lead=lead)
