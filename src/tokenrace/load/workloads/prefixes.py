"""Shared prefixes and cache busting: the two ends of prefix caching.

- Shared prefixes: K distinct system prompts of N tokens each; every request gets one, drawn by
  seed. Production traffic looks like this (one system prompt per product or agent), and it is what
  prefix caches are built for: after the first request of a group, its N tokens need no prefill.
- Cache busting: a short tag, unique to the request, at the very start of the prompt. Prefix caches
  match from the first token, so a prompt that differs there shares nothing with any other. The
  chat template's own opening still comes before it (a few tokens, or a default system prompt
  some templates insert: 24 tokens for SmolLM2), and caches that match token by token (llama.cpp,
  SGLang) report it as cached; vLLM's 16-token blocks usually do not.

The tag must also differ between runs, because a server's cache outlives a run: a second run with
the same seed would otherwise hit what the first one cached. So the tag is built from a per-run
nonce (`new_nonce()`, to record in the manifest) and the request's sequence number; everything else
is deterministic given the seed.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from tokenrace.client.openai import Prompt
from tokenrace.errors import UsageError
from tokenrace.load.tokens import Tokenizer
from tokenrace.load.workloads.text import SizedText, sized_text

Sizing = Literal["exact", "approximate"]


@dataclass(frozen=True, slots=True)
class SharedPrefixes:
    """K system prompts asked to be `tokens` long; `measured[i]` is prefix i's length (None without a tokenizer)."""

    texts: tuple[str, ...]
    tokens: int
    measured: tuple[int | None, ...]
    seed: int

    @property
    def groups(self) -> int:
        return len(self.texts)

    @property
    def sizing(self) -> Sizing:
        return "exact" if all(m == self.tokens for m in self.measured) else "approximate"

    def draw(self, count: int) -> list[int]:
        """The group of each of `count` requests, uniform and deterministic given the seed."""
        return draw_groups(count, self.groups, self.seed)

    def apply(self, prompt: Prompt, group: int) -> Prompt:
        """`prompt` with group `group`'s prefix as its system message (chat) or leading text (completions)."""
        return with_prefix(prompt, self.texts[group])


async def shared_prefixes(tokens: int, groups: int, tokenizer: Tokenizer | None, seed: int = 0) -> SharedPrefixes:
    """K = `groups` distinct prefixes of `tokens` tokens (exact with a tokenizer).

    Each begins with its group number, so no two share more than their first token or two.
    Raises UsageError for sizes under 1.
    """
    if tokens < 1:
        raise UsageError(f"shared prefix length must be at least 1 token, got {tokens}")
    if groups < 1:
        raise UsageError(f"prefix groups must be at least 1, got {groups}")
    made: list[SizedText] = []
    for group in range(groups):
        rng = np.random.default_rng([seed, group])  # one stream per group: K=4 and K=8 share their first 4
        made.append(await sized_text(tokens, rng, tokenizer, lead=f"Group {group + 1}."))
    return SharedPrefixes(tuple(m.text for m in made), tokens, tuple(m.tokens for m in made), seed)


def draw_groups(count: int, groups: int, seed: int = 0) -> list[int]:
    """`count` group indices in [0, groups), uniform, deterministic given the seed."""
    if groups < 1:
        raise UsageError(f"prefix groups must be at least 1, got {groups}")
    rng = np.random.default_rng([seed, 0x9F1])
    return [int(g) for g in rng.integers(0, groups, size=count)]


def with_prefix(prompt: Prompt, prefix: str) -> Prompt:
    """A copy of `prompt` that starts with `prefix`: a system message first for chat, text for completions.

    A chat prompt that already has a system message gets the prefix at the start of it, so the
    prefix is still the first thing the model reads.
    """
    if prompt.messages is None:
        return replace(prompt, text=f"{prefix}\n\n{prompt.as_text()}")
    messages = [m.copy() for m in prompt.messages]
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        messages[0]["content"] = f"{prefix}\n\n{messages[0]['content']}"
    else:
        messages.insert(0, {"role": "system", "content": prefix})
    return replace(prompt, messages=messages)


def new_nonce() -> str:
    """A fresh per-run nonce for cache-bust tags (random on purpose: see the module docstring)."""
    return secrets.token_hex(4)


def bust_tag(nonce: str, seq: int) -> str:
    """The request's unique tag: a hash of (nonce, seq), then seq, which makes it unique.

    The hash comes first because caches that match token by token (llama.cpp, SGLang) would
    otherwise reuse a common opening such as the nonce itself: measured on llama.cpp, tags
    `[n1-1]` and `[n1-2]` shared 4 tokens. Hex digits differ from the first character 15 times in 16.
    """
    digest = hashlib.blake2b(f"{nonce}:{seq}".encode(), digest_size=4).hexdigest()
    return f"{digest}-{seq}"


def bust(prompt: Prompt, nonce: str, seq: int, *, system: bool = False) -> Prompt:
    """A copy of `prompt` whose very first characters are the request's unique tag.

    For chat the tag goes at the start of the first message, whatever its role, since that is
    where the prompt (after the template's fixed opening) begins. With `system`, a prompt without
    a system message gets the tag as a system message of its own: chat templates that insert a
    default system prompt when there is none (SmolLM2's, Qwen2.5's) then insert nothing before the
    tag, and a token-by-token cache finds only the template's first few tokens. The price: the
    model answers without its default system prompt.
    """
    tag = bust_tag(nonce, seq)
    if system:
        messages = [m.copy() for m in prompt.as_messages()]
        if not messages or messages[0].get("role") != "system":
            return replace(prompt, messages=[{"role": "system", "content": tag}, *messages], text=None)
        return bust(replace(prompt, messages=messages, text=None), nonce, seq)
    if prompt.messages is None:
        return replace(prompt, text=f"{tag} {prompt.as_text()}")
    messages = [m.copy() for m in prompt.messages]
    if not messages:
        messages = [{"role": "user", "content": tag}]
    else:
        first = messages[0]
        content = first.get("content")
        if isinstance(content, list):  # typed parts: a text part of its own, first
            first["content"] = [{"type": "text", "text": tag}, *content]
        else:
            first["content"] = f"{tag} {content or ''}".rstrip()
    return replace(prompt, messages=messages)
