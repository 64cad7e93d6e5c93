"""What a run sends: independent prompts (shaped by shared prefixes and cache busting), multi-turn
sessions, or a timestamped trace. Built once before the load starts, outside any timed section.

- `Prompts`: the runner's view of independent prompts, `pick(seq)`. A shared prefix is a system
  prompt drawn per request; busting puts a tag unique to the request at the start of what follows
  the shared prefix, so the prefix stays cacheable and nothing else is.
- `Sessions`: conversations run turn by turn; each turn's history holds the model's real answers.
  With busting, a session's tag is the same on every turn: later turns may hit what earlier turns of
  the *same* session cached (as in production), never another session's.
- `TraceLoad`: one prompt and one send offset per trace line, replayed open loop.
"""

from __future__ import annotations

import asyncio
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from tokenrace.client.images import Image
from tokenrace.client.openai import Prompt
from tokenrace.errors import InvalidInput, UsageError
from tokenrace.load.prompts import PromptSet
from tokenrace.load.tokens import Tokenizer, can_decode
from tokenrace.load.workloads.images import ImageBank, ImageSpec, attach, build_bank, read_dir
from tokenrace.load.workloads.prefixes import SharedPrefixes, bust, draw_groups, new_nonce, shared_prefixes
from tokenrace.load.workloads.sessions import (
    DEFAULT_SESSION_HEADER,
    Conversation,
    ConversationFile,
    TurnsSpec,
    load_messages_jsonl,
    load_sharegpt,
    session_prompt,
    synthetic_conversations,
    with_think_times,
    with_turn_images,
)
from tokenrace.load.workloads.traces import DEFAULT_BLOCK_TOKENS, Trace, TracePromptBuilder, load_trace

# Sequence numbers of a run are far below this; sessions' bust tags use this offset plus the session
# index, so a session's tag never equals an independent request's.
_SESSION_TAG_BASE = 1_000_000_000
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Prompts:
    """Independent prompts, each possibly behind a shared prefix and a unique tag."""

    base: PromptSet
    prefixes: SharedPrefixes | None = None
    nonce: str | None = None  # set: every request is busted
    images: ImageBank | None = None  # the images each request carries, by its number

    @property
    def busted(self) -> bool:
        return self.nonce is not None

    def pick(self, seq: int) -> Prompt:
        prompt = self.base.pick(seq)
        if self.nonce is not None:
            # Without a shared prefix the tag is a system message of its own, so a chat template's
            # default system prompt is not inserted before it (see `bust`).
            prompt = bust(prompt, self.nonce, seq, system=self.prefixes is None)
        if self.prefixes is not None:
            group = draw_groups(seq + 1, self.prefixes.groups, self.prefixes.seed)[seq]
            prompt = self.prefixes.apply(prompt, group)
        if self.images is not None:
            prompt = attach(prompt, self.images.for_request(seq))
        return prompt


@dataclass(frozen=True, slots=True)
class Sessions:
    """Conversations; `concurrency` counts sessions in flight."""

    conversations: tuple[Conversation, ...]
    header: str | None = DEFAULT_SESSION_HEADER
    prefixes: SharedPrefixes | None = None
    nonce: str | None = None
    source: str = "synthetic"

    @property
    def busted(self) -> bool:
        return self.nonce is not None

    def turn_prompt(self, index: int, turn: int, answers: list[str]) -> Prompt:
        conversation = self.conversations[index]
        prompt = session_prompt(conversation, turn, answers, self.header)
        if self.nonce is not None:
            prompt = bust(prompt, self.nonce, _SESSION_TAG_BASE + index, system=self.prefixes is None)
        if self.prefixes is not None:
            group = draw_groups(index + 1, self.prefixes.groups, self.prefixes.seed)[index]
            prompt = self.prefixes.apply(prompt, group)
        return prompt


@dataclass(frozen=True, slots=True)
class TraceLoad:
    """A trace's requests: `prompts[i]` is sent at `offsets_s[i]` after the start."""

    prompts: tuple[Prompt, ...]
    offsets_s: tuple[float, ...]
    source: str
    images: ImageBank | None = None

    def pick(self, index: int) -> Prompt:
        prompt = self.prompts[index]
        return prompt if self.images is None else attach(prompt, self.images.for_request(index))


Workload = Prompts | Sessions | TraceLoad


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """How to shape what is sent (the prompt source itself comes from the run's PromptSet)."""

    cache_bust: bool | None = None  # None: bust built-in and synthetic prompts, not the user's own
    shared_prefix_tokens: int | None = None
    prefix_groups: int = 1
    turns: TurnsSpec | None = None  # synthetic multi-turn sessions
    think_time_s: float = 0.0
    sessions_file: str | None = None  # ShareGPT JSON or messages JSONL
    skip_invalid_sessions: bool = False  # leave out (and count) entries a public dump gets wrong
    session_header: str | None = DEFAULT_SESSION_HEADER
    trace_file: str | None = None
    trace_format: str = "mooncake"
    trace_speed: float = 1.0
    trace_block_tokens: int = DEFAULT_BLOCK_TOKENS
    images: ImageSpec | None = None  # images on (a share of) the requests

    def validate(self) -> None:
        """Raise InvalidInput for a size, a count or a speed that no workload can have."""
        if self.images is not None:
            self.images.validate()
        if self.shared_prefix_tokens is not None and self.shared_prefix_tokens < 1:
            raise InvalidInput("shared_prefix_tokens", f"must be at least 1 token, got {self.shared_prefix_tokens}")
        if self.prefix_groups < 1:
            raise InvalidInput("prefix_groups", f"must be at least 1, got {self.prefix_groups}")
        if not self.think_time_s >= 0:
            raise InvalidInput("think_time", f"must not be negative, got {self.think_time_s} s")
        if not (self.trace_speed > 0 and math.isfinite(self.trace_speed)):
            raise InvalidInput("trace_speed", f"must be a positive number, got {self.trace_speed}")
        if self.trace_block_tokens < 1:
            raise InvalidInput("trace_block_tokens", f"must be at least 1 token, got {self.trace_block_tokens}")

    def busts(self, base: PromptSet) -> bool:
        if self.cache_bust is not None:
            return self.cache_bust
        if self.sessions_file is not None or self.trace_file is not None:
            return False
        return base.name == "builtin" or base.name.startswith("synthetic")


@dataclass(frozen=True, slots=True)
class Built:
    """The workload, and what the manifest records about it."""

    workload: Workload
    kind: str  # prompts | sessions | trace
    busted: bool
    nonce: str
    source: str
    sizing: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkloadFiles:
    """The trace or conversations file a workload replays, read and checked (no network needed)."""

    trace: Trace | None = None
    conversations: ConversationFile | None = None
    images: tuple[Image, ...] = ()  # the image folder's files, each checked to be an image


def read_workload_files(spec: WorkloadSpec) -> WorkloadFiles:
    """Check the spec and read its files. A bad file raises InvalidInput naming the input (`trace`,
    `sessions`)."""
    spec.validate()
    trace_file, sessions_file = spec.trace_file, spec.sessions_file
    trace = _as_input("trace", lambda: load_trace(trace_file, spec.trace_format)) if trace_file else None
    skip = spec.skip_invalid_sessions
    conversations = _as_input("sessions", lambda: _conversation_file(sessions_file, skip)) if sessions_file else None
    directory = spec.images.directory if spec.images is not None else None
    return WorkloadFiles(trace, conversations, read_dir(directory) if directory else ())


def _as_input(param: str, read: Callable[[], _T]) -> _T:
    try:
        return read()
    except InvalidInput:
        raise
    except UsageError as exc:
        raise InvalidInput(param, str(exc)) from None


async def build_workload(
    spec: WorkloadSpec,
    base: PromptSet,
    tokenizer: Tokenizer | None,
    seed: int | None,
    sessions: int,
    files: WorkloadFiles | None = None,
    requests: int | None = None,
) -> Built:
    """Make prompts before the load starts. `sessions`: how many synthetic sessions; `files`: the
    spec's files already read (by `read_workload_files`), else they are read here; `requests`: how
    many requests the run sends in all, when known (each gets its own images)."""
    files = files if files is not None else read_workload_files(spec)
    built = await _build(spec, base, tokenizer, seed, sessions, files)
    if spec.images is None:
        return built
    return await _with_images(built, spec.images, seed or 0, requests, files.images)


async def _with_images(
    built: Built, spec: ImageSpec, seed: int, requests: int | None, files: tuple[Image, ...]
) -> Built:
    """The workload with its images made (in a thread: encoding takes a while) and attached; the
    run's nonce salts them, so no two runs send the same image."""
    salt = zlib.crc32(built.nonce.encode())
    w = built.workload
    if isinstance(w, Sessions):
        turns = sum(len(c.turns) for c in w.conversations)
        bank = await asyncio.to_thread(build_bank, spec, turns, seed, files, salt)
        workload: Workload = replace(w, conversations=tuple(with_turn_images(w.conversations, bank)))
    else:
        count = len(w.prompts) if isinstance(w, TraceLoad) else requests
        bank = await asyncio.to_thread(build_bank, spec, count, seed, files, salt)
        workload = replace(w, images=bank)
    note = bank.note()
    return replace(built, workload=workload, notes=(*built.notes, note) if note else built.notes)


async def _build(
    spec: WorkloadSpec,
    base: PromptSet,
    tokenizer: Tokenizer | None,
    seed: int | None,
    sessions: int,
    files: WorkloadFiles,
) -> Built:
    nonce = new_nonce()  # per run: a server's cache outlives a run, so tags must differ between runs
    seed = seed or 0
    tokenizer = tokenizer if can_decode(tokenizer) else None  # exact sizing cuts token ids back into text
    if files.trace is not None:
        trace = files.trace
        builder = TracePromptBuilder(trace, tokenizer, spec.trace_block_tokens, seed, nonce)
        built = await builder.build_all()
        offsets = tuple(trace.offsets(spec.trace_speed))
        exact = tokenizer is not None and all(b.tokens == b.target for b in built)
        load = TraceLoad(tuple(b.prompt for b in built), offsets, trace.source)
        return Built(load, "trace", True, nonce, trace.source, "exact" if exact else "approximate")
    prefixes = None
    if spec.shared_prefix_tokens is not None:
        prefixes = await shared_prefixes(spec.shared_prefix_tokens, spec.prefix_groups, tokenizer, seed)
    busted = spec.busts(base)
    tag = nonce if busted else None
    sizing = prefixes.sizing if prefixes is not None else base.sizing
    if spec.sessions_file is not None or spec.turns is not None:
        notes: tuple[str, ...] = ()
        if files.conversations is not None:
            loaded = files.conversations
            conversations = with_think_times(loaded.conversations, spec.think_time_s, seed)
            source, notes = loaded.source, skipped_notes(loaded.skipped)
        else:
            assert spec.turns is not None
            users = [p.as_text() for p in base.prompts]
            conversations = synthetic_conversations(sessions, spec.turns, users, spec.think_time_s, seed)
            source = f"synthetic sessions over {base.name}"
        workload = Sessions(tuple(conversations), spec.session_header, prefixes, tag, source)
        return Built(workload, "sessions", busted, nonce, source, sizing, notes)
    return Built(Prompts(base, prefixes, tag), "prompts", busted, nonce, base.name, sizing)


def _conversation_file(path: str, skip_invalid: bool) -> ConversationFile:
    """ShareGPT JSON (a list) or OpenAI messages JSONL, told apart by the first character."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).lstrip()
    except OSError as exc:
        raise UsageError(f"cannot read the sessions file {path}: {exc.strerror}") from None
    if head.startswith(b"["):
        return load_sharegpt(path, skip_invalid)
    return load_messages_jsonl(path, skip_invalid)


MAX_SKIPPED_NOTES = 20


def skipped_notes(skipped: tuple[str, ...]) -> tuple[str, ...]:
    """The manifest's account of skipped entries: how many, and the first few reasons (a public
    dump can have thousands)."""
    if not skipped:
        return ()
    more = len(skipped) - MAX_SKIPPED_NOTES
    tail = (f"... and {more} more",) if more > 0 else ()
    return (f"{len(skipped)} conversations skipped (--skip-invalid-sessions)", *skipped[:MAX_SKIPPED_NOTES], *tail)
