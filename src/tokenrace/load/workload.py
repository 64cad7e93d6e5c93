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

from dataclasses import dataclass

from tokenrace.client.openai import Prompt
from tokenrace.load.prompts import PromptSet
from tokenrace.load.workloads.prefixes import SharedPrefixes, bust, draw_groups
from tokenrace.load.workloads.sessions import DEFAULT_SESSION_HEADER, Conversation, session_prompt

# Sequence numbers of a run are far below this; sessions' bust tags use this offset plus the session
# index, so a session's tag never equals an independent request's.
_SESSION_TAG_BASE = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Prompts:
    """Independent prompts, each possibly behind a shared prefix and a unique tag."""

    base: PromptSet
    prefixes: SharedPrefixes | None = None
    nonce: str | None = None  # set: every request is busted

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

    def pick(self, index: int) -> Prompt:
        return self.prompts[index]


Workload = Prompts | Sessions | TraceLoad
