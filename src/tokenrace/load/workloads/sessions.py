"""Multi-turn sessions: conversations whose context grows turn after turn.

A `Conversation` is what a session will send: an optional system prompt and its user turns, with
the think time to wait before each turn after the first. The assistant's side is *not* replayed
from a file: each turn's history holds the answers the model under test really gave
(`messages_for_turn`), so the context grows as it would in production and the server's prefix cache
sees the same prompts a real chat would send. A file's own assistant answers are kept as
`Turn.reference` (e.g. to size `max_tokens` like the original), never sent.

Sources:
- synthetic: `synthetic_conversations(count, turns, user_texts, think_time_s, seed)`, turns drawn
  per session from `N` or `MEAN,STD` (at least 1), think time exponential with the given mean;
- `load_sharegpt(path)`: ShareGPT JSON, `[{"conversations": [{"from": "human"|"gpt", "value": ...}]}]`;
  a ShareGPT-4V-style `"image"` (a path, or a list of paths, relative to the file's folder) is sent
  with the first user turn, its `<image>` placeholders removed from the text;
- `load_messages_jsonl(path)`: one conversation per line, `{"messages": [{"role", "content"}]}`; a
  user content list with OpenAI `image_url` parts is sent as it is;
  then `with_think_times(...)` draws the pauses between their turns.

A turn's images stay in the history of the turns after it, as a chat client re-sends them.

Pure and deterministic given the seed; bad input raises UsageError naming the file and the entry.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import orjson

from tokenrace.client.conversation import ChatMessage, Content, ContentPart, chat_content, content_text
from tokenrace.client.images import Image, ImageTally
from tokenrace.client.openai import Prompt
from tokenrace.errors import InvalidInput, UsageError
from tokenrace.load.workloads.images import ImageBank, read_file, tally_messages

DEFAULT_SESSION_HEADER = "X-Session-ID"


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn. `reference`: the answer the source file gave (kept, never sent)."""

    user: str
    reference: str | None = None
    max_tokens: int | None = None
    parts: tuple[ContentPart, ...] | None = None  # a file's own content parts (with images), sent as given
    images: tuple[Image, ...] = ()  # images sent after the text (or the parts)
    tally: ImageTally | None = None  # the images this turn carries, when it carries any

    def content(self) -> Content:
        """The user message's content: the text, or parts when the turn carries images."""
        if self.parts is None and not self.images:
            return self.user
        parts: list[ContentPart] = list(self.parts) if self.parts is not None else [{"type": "text", "text": self.user}]
        return parts + [i.chat_part() for i in self.images]


@dataclass(frozen=True, slots=True)
class Conversation:
    """One session's script. `think_s[i]` is the pause before turn i + 1 (len(turns) - 1 of them)."""

    id: str
    turns: tuple[Turn, ...]
    system: str | None = None
    think_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError(f"conversation {self.id!r} has no user turn")
        if self.think_s and len(self.think_s) != len(self.turns) - 1:
            raise ValueError(f"conversation {self.id!r}: {len(self.think_s)} think times for {len(self.turns)} turns")

    def think_before(self, turn: int) -> float:
        """Seconds to wait before sending `turn` (1-based); 0 for the first turn or when none were drawn."""
        if turn <= 1 or not self.think_s:
            return 0.0
        return self.think_s[turn - 2]


@dataclass(frozen=True, slots=True)
class TurnsSpec:
    """Turns per session: `mean`, with a normal spread `std` (0: every session has `mean`)."""

    mean: float
    std: float = 0.0


def parse_turns(text: str) -> TurnsSpec:
    """`N` or `MEAN,STD` -> TurnsSpec. Raises UsageError."""
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise InvalidInput("turns", f"cannot read {text!r} (use N or MEAN,STD, e.g. 4 or 4,2)") from None
    if len(values) not in (1, 2):
        raise InvalidInput("turns", f"cannot read {text!r} (use N or MEAN,STD, e.g. 4 or 4,2)")
    mean, std = values[0], values[1] if len(values) == 2 else 0.0
    if mean < 1 or std < 0 or not np.isfinite(mean + std):
        raise InvalidInput("turns", f"the mean must be at least 1 and the spread not negative, got {text!r}")
    return TurnsSpec(mean, std)


def draw_turns(spec: TurnsSpec, count: int, seed: int = 0) -> list[int]:
    """Turns for each of `count` sessions: rounded normal draws, never under 1."""
    if spec.std <= 0:
        return [max(1, round(spec.mean))] * count
    rng = np.random.default_rng([seed, 0x7E5])
    return [max(1, round(float(x))) for x in rng.normal(spec.mean, spec.std, count)]


def draw_think_times(turns: int, mean_s: float, rng: np.random.Generator) -> tuple[float, ...]:
    """The pauses between `turns` turns: exponential with mean `mean_s`; none when `mean_s` is 0."""
    if mean_s < 0:
        raise UsageError(f"think time must not be negative, got {mean_s} s")
    if mean_s == 0 or turns < 2:
        return ()
    return tuple(float(x) for x in rng.exponential(mean_s, turns - 1))


def synthetic_conversations(
    count: int,
    turns: TurnsSpec,
    user_texts: Sequence[str],
    think_time_s: float = 0.0,
    seed: int = 0,
    system: str | None = None,
) -> list[Conversation]:
    """`count` sessions whose user turns are drawn from `user_texts`, ids `s1`, `s2`, ..."""
    if not user_texts:
        raise UsageError("synthetic sessions need at least one user prompt")
    lengths = draw_turns(turns, count, seed)
    rng = np.random.default_rng([seed, 0x5E5])
    conversations = []
    for index, n in enumerate(lengths, 1):
        picks = rng.integers(0, len(user_texts), size=n)
        think = draw_think_times(n, think_time_s, rng)
        script = tuple(Turn(user_texts[int(i)]) for i in picks)
        conversations.append(Conversation(f"s{index}", script, system, think))
    return conversations


def with_think_times(conversations: Sequence[Conversation], mean_s: float, seed: int = 0) -> list[Conversation]:
    """Conversations (e.g. from a file) with exponential think times drawn, deterministic given the seed."""
    rng = np.random.default_rng([seed, 0x7A1])
    return [Conversation(c.id, c.turns, c.system, draw_think_times(len(c.turns), mean_s, rng)) for c in conversations]


def messages_for_turn(conversation: Conversation, turn: int, answers: Sequence[str]) -> list[ChatMessage]:
    """The chat messages to send for `turn` (1-based): the system prompt, every earlier user turn
    followed by the answer the model really gave to it (`answers[i]` for turn i + 1), then this turn.

    Raises ValueError when `answers` does not hold exactly the earlier turns' answers.
    """
    if not 1 <= turn <= len(conversation.turns):
        raise ValueError(f"conversation {conversation.id!r} has no turn {turn}")
    if len(answers) != turn - 1:
        raise ValueError(f"turn {turn} needs the {turn - 1} earlier answers, got {len(answers)}")
    messages: list[ChatMessage] = []
    if conversation.system is not None:
        messages.append({"role": "system", "content": conversation.system})
    for earlier, answer in zip(conversation.turns[: turn - 1], answers, strict=True):
        messages.append({"role": "user", "content": earlier.content()})
        messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": conversation.turns[turn - 1].content()})
    return messages


def images_up_to(conversation: Conversation, turn: int) -> ImageTally | None:
    """The images a request for `turn` carries: its own and every earlier turn's (None: none)."""
    tallies = [t.tally for t in conversation.turns[:turn] if t.tally is not None]
    if not tallies:
        return None
    total = ImageTally()
    for tally in tallies:
        total = total.plus(tally)
    return total


def with_turn_images(conversations: Sequence[Conversation], bank: ImageBank) -> Iterator[Conversation]:
    """The conversations with the bank's images added to their turns, one bank set per turn in order."""
    index = 0
    for c in conversations:
        turns = []
        for t in c.turns:
            images = bank.for_request(index)
            index += 1
            turns.append(_with_images(t, images) if images else t)
        yield replace(c, turns=tuple(turns))


def _with_images(turn: Turn, images: tuple[Image, ...]) -> Turn:
    tally = (turn.tally or ImageTally()).plus(ImageTally.of(images))
    return replace(turn, images=turn.images + images, tally=tally)


def session_prompt(
    conversation: Conversation, turn: int, answers: Sequence[str], header: str | None = DEFAULT_SESSION_HEADER
) -> Prompt:
    """The request for `turn` (1-based): its messages (`messages_for_turn`), the turn's max_tokens,
    and the session header carrying the conversation's id (none when `header` is None)."""
    messages = messages_for_turn(conversation, turn, answers)
    headers = {header: session_header_value(conversation.id)} if header else None
    max_tokens = conversation.turns[turn - 1].max_tokens
    images = images_up_to(conversation, turn)
    label = f"{conversation.id}#{turn}"
    return Prompt(messages=messages, max_tokens=max_tokens, label=label, headers=headers, images=images)


def session_header_value(conv_id: str) -> str:
    """`conv_id` made safe for an HTTP header: ids from files may hold any text, and a CR/LF or a
    non-ASCII character would make the request fail before it is sent."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._:-") else "_" for c in conv_id)
    return safe[:128] or "_"


# --- files ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConversationFile:
    """Conversations read from `source`. `skipped`: one message per entry left out (skip_invalid only)."""

    source: str
    conversations: tuple[Conversation, ...]
    skipped: tuple[str, ...] = ()


# One message of a file: (role, its text, its content parts when it carries images).
_Message: TypeAlias = tuple[str, str, list[ContentPart] | None]

SHAREGPT_USER = ("human", "user")
SHAREGPT_ASSISTANT = ("gpt", "assistant", "chatgpt", "model")
SHAREGPT_SYSTEM = ("system",)


def load_sharegpt(path: str | Path, skip_invalid: bool = False) -> ConversationFile:
    """ShareGPT JSON: a list of `{"conversations": [{"from": ..., "value": ...}], "id"?: ...}`.

    A bad entry raises UsageError naming its index; with `skip_invalid` (public ShareGPT dumps hold
    empty and assistant-first conversations) it is left out and listed in `skipped` instead.
    """
    p = Path(path)
    data = _read_json(p)
    if not isinstance(data, list):
        raise UsageError(f"{p}: expected a JSON list of conversations (ShareGPT format)")
    conversations: list[Conversation] = []
    skipped: list[str] = []
    for index, entry in enumerate(data):
        try:
            conversations.append(_sharegpt_entry(entry, p, index))
        except UsageError as exc:
            if not skip_invalid:
                raise
            skipped.append(str(exc))
    return _file(p, conversations, skipped)


def load_messages_jsonl(path: str | Path, skip_invalid: bool = False) -> ConversationFile:
    """JSONL, one conversation per line: `{"messages": [{"role": ..., "content": ...}], "id"?: ...}`.

    A bad line raises UsageError naming it (`FILE:LINE`); with `skip_invalid` it is listed in `skipped`.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {p}: {exc.strerror}") from None
    conversations: list[Conversation] = []
    skipped: list[str] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            conversations.append(_messages_line(line, p, lineno))
        except UsageError as exc:
            if not skip_invalid:
                raise
            skipped.append(str(exc))
    return _file(p, conversations, skipped)


def _file(p: Path, conversations: list[Conversation], skipped: list[str]) -> ConversationFile:
    if not conversations:
        raise UsageError(f"{p}: no usable conversations" + (f" ({skipped[0]})" if skipped else ""))
    return ConversationFile(str(p), tuple(conversations), tuple(skipped))


def _sharegpt_entry(entry: Any, p: Path, index: int) -> Conversation:
    where = f"{p}: entry {index}"
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise UsageError(f'{where}: expected an object with a "conversations" list')
    images = _sharegpt_images(entry.get("image"), p, where)
    messages: list[_Message] = []
    for j, message in enumerate(entry["conversations"]):
        if not isinstance(message, dict) or not isinstance(message.get("value"), str):
            raise UsageError(f'{where}, message {j}: expected {{"from": ..., "value": "text"}}')
        text = message["value"].replace("<image>\n", "").replace("<image>", "") if images else message["value"]
        messages.append((_sharegpt_role(message.get("from"), f"{where}, message {j}"), text, None))
    conversation = _conversation(_entry_id(entry.get("id"), p, index), messages, where)
    if not images:
        return conversation
    return replace(conversation, turns=(_with_images(conversation.turns[0], images), *conversation.turns[1:]))


def _sharegpt_images(value: Any, p: Path, where: str) -> tuple[Image, ...]:
    """A ShareGPT-4V `image` field: a path or a list of paths, relative to the file's folder."""
    if value is None:
        return ()
    paths = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) and v for v in paths):
        raise UsageError(f'{where}: "image" must be a file path or a list of paths')
    return tuple(read_file(p.parent / v, "sessions") for v in paths)


def _messages_line(line: str, p: Path, lineno: int) -> Conversation:
    where = f"{p}:{lineno}"
    try:
        entry: Any = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{where}: not JSON ({exc})") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("messages"), list):
        raise UsageError(f'{where}: expected an object with a "messages" list')
    messages: list[_Message] = []
    for j, message in enumerate(entry["messages"]):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise UsageError(f'{where}, message {j}: expected a "role" of system, user or assistant')
        try:
            content = chat_content(message.get("content"), images=message["role"] == "user")
        except ValueError as exc:
            raise UsageError(f"{where}, message {j}: {exc}") from None
        parts = content if isinstance(content, list) and any(p["type"] == "image_url" for p in content) else None
        messages.append((message["role"], content_text(content), parts))
    return _conversation(_entry_id(entry.get("id"), p, lineno), messages, where)


def _read_json(p: Path) -> Any:
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {p}: {exc.strerror}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{p}: not JSON ({exc})") from None


def _sharegpt_role(value: Any, where: str) -> str:
    if value in SHAREGPT_USER:
        return "user"
    if value in SHAREGPT_ASSISTANT:
        return "assistant"
    if value in SHAREGPT_SYSTEM:
        return "system"
    raise UsageError(f'{where}: "from" is {value!r}, expected "human" or "gpt" (or "system")')


def _user_turn(pending: list[tuple[str, list[ContentPart] | None]], where: str, reference: str | None = None) -> Turn:
    """One turn from consecutive user messages; their image parts, when any, are kept as sent."""
    text = "\n\n".join(t for t, _ in pending)
    if all(parts is None for _, parts in pending):
        return Turn(text, reference=reference)
    merged: list[ContentPart] = []
    for t, parts in pending:
        merged += parts if parts is not None else [{"type": "text", "text": t}]
    tally = tally_messages([{"role": "user", "content": merged}], "sessions", where)
    return Turn(text, reference=reference, parts=tuple(merged), tally=tally)


def _entry_id(value: Any, p: Path, position: int) -> str:
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else f"{p.stem}-{position}"


def _conversation(conv_id: str, messages: list[_Message], where: str) -> Conversation:
    """Turns from (role, text, image parts) triples: one system message at most, first; user turns,
    each with the assistant answer that follows it as its reference. Consecutive user messages are
    one turn."""
    system: str | None = None
    turns: list[Turn] = []
    pending: list[tuple[str, list[ContentPart] | None]] = []
    for i, (role, text, parts) in enumerate(messages):
        if role == "system":
            if i != 0:
                raise UsageError(f"{where}: a system message is only allowed first (message {i})")
            system = text
        elif role == "user":
            pending.append((text, parts))
        elif pending:  # the assistant's answer to the user turn(s) before it
            turns.append(_user_turn(pending, where, reference=text))
            pending = []
        elif turns:
            raise UsageError(f"{where}: two assistant messages in a row (message {i})")
        else:
            raise UsageError(
                f"{where}: the conversation must start with a user message (message {i} is the assistant's)"
            )
    if pending:
        turns.append(_user_turn(pending, where))
    if not turns:
        raise UsageError(f"{where}: no user turn")
    return Conversation(conv_id, tuple(turns), system)
