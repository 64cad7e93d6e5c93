"""Filler text of a given length in tokens: exact with a tokenizer, approximate without.

The workloads (shared prefixes, trace blocks) need text whose length in tokens is known.

- With a tokenizer (the `Tokenizer` protocol: a local tokenizer.json or GGUF, or the server's
  /tokenize): draw more words than needed, encode, keep the first N ids, decode, and re-encode to
  check; characters are trimmed while the count is over N. The count measured last is returned,
  so a caller always knows the true length, and `exact` says whether it is N.
- Without one: one word per token, from a vocabulary of short common English words. In BPE
  vocabularies (GPT-2 style, Llama, Qwen) each of these words with its leading space is usually a
  single token, but nothing checks it here: the length is approximate, and `tokens` is None.

Deterministic: the words come from the numpy Generator the caller passes in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenrace.load.tokens import Tokenizer

VOCABULARY: tuple[str, ...] = tuple(
    (
        "the model reads every weight once per token so memory sets the pace while compute waits "
        "a request comes in and the server puts it in a batch with others then sends tokens back "
        "as soon as they exist time cost queue cache fill step batch stream token window server "
        "client user answer question short long fast slow first last next more less high low part "
        "line page book word name place water light sound music color paper table house river "
        "city road tree stone field north south east west day night year week hour minute"
    ).split()
)


@dataclass(frozen=True, slots=True)
class SizedText:
    """A text asked to be `target` tokens long. `tokens`: its measured length, None without a tokenizer."""

    text: str
    target: int
    tokens: int | None

    @property
    def exact(self) -> bool:
        return self.tokens == self.target


def draw_words(rng: np.random.Generator, count: int) -> list[str]:
    return [VOCABULARY[int(i)] for i in rng.integers(0, len(VOCABULARY), size=count)]


def approximate_tokens(text: str) -> int:
    """The no-tokenizer estimate: one token per whitespace-separated word."""
    return len(text.split())


async def sized_text(target: int, rng: np.random.Generator, tokenizer: Tokenizer | None, lead: str = "") -> SizedText:
    """Text of `target` tokens that begins with `lead` (which counts towards the length).

    Raises ValueError for a target under 1; a tokenizer's own failure propagates.
    """
    if target < 1:
        raise ValueError(f"a text needs at least 1 token, got {target}")
    if tokenizer is None:
        room = max(0, target - approximate_tokens(lead))
        return SizedText(_join(lead, draw_words(rng, room)), target, None)
    words = draw_words(rng, target + 8)
    text = _join(lead, words)
    ids = await tokenizer.encode(text)
    while len(ids) < target:  # a tokenizer that merges words: add more until there is enough
        text = _join(text, draw_words(rng, target - len(ids) + 8))
        ids = await tokenizer.encode(text)
    return await fit_ids(ids[:target], target, tokenizer)


async def fit_ids(ids: list[int], target: int, tokenizer: Tokenizer) -> SizedText:
    """Decode `ids` and trim characters until the text re-encodes to at most `target` tokens.

    Decoding and re-encoding can merge differently at the cut, so the count is measured, not assumed.
    """
    text = await tokenizer.decode(ids)
    count = len(await tokenizer.encode(text))
    while text and count > target:
        text = text[:-1]
        count = len(await tokenizer.encode(text))
    return SizedText(text, target, count)


def _join(lead: str, words: list[str]) -> str:
    if not words:
        return lead
    return f"{lead} {' '.join(words)}" if lead else " ".join(words)
