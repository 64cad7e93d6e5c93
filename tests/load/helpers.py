"""Tokenizers for the workload tests, implementing the Tokenizer protocol without any model files."""

from __future__ import annotations


class WordTokenizer:
    """The fake server's tokenizer: one token per whitespace-separated word."""

    name = "words"
    local = True

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._words: list[str] = []
        self.calls = 0

    async def encode(self, text: str) -> list[int]:
        self.calls += 1
        out = []
        for word in text.split():
            if word not in self._ids:
                self._ids[word] = len(self._words)
                self._words.append(word)
            out.append(self._ids[word])
        return out

    async def decode(self, ids: list[int]) -> str:
        return " ".join(self._words[i] for i in ids)


class CharTokenizer:
    """One token per character: words are many tokens, so cuts fall inside words."""

    name = "chars"
    local = True

    async def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    async def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


class GrowingTokenizer(CharTokenizer):
    """Characters, but "e" decodes to "e'" (two tokens when encoded again): decoding a cut grows the
    text, the case `fit_ids` must trim."""

    name = "growing"

    async def decode(self, ids: list[int]) -> str:
        return "".join("e'" if i == ord("e") else chr(i) for i in ids)
