"""A simulated prefix cache for the fake server.

Engines keep the KV of prompt prefixes in fixed-size blocks (vLLM's automatic prefix caching,
SGLang's radix tree, llama.cpp's per-slot prompt cache) and skip prefilling them again. Here a
request's cached tokens are the longest prefix of its prompt, in whole blocks, that an earlier
request already sent. Each block is keyed by a hash of the whole prompt up to and including it (as
vLLM keys its blocks), so a block matches only after the same beginning: one changed word early in
the prompt misses everything after it, which is what a cache-busting tag relies on.

A block is `block_size` words of the toy tokenizer (unit "tokens") or `block_size` characters (unit
"chars": independent of any tokenizer, for tests whose client counts tokens differently).
Capacity is in blocks, least recently used evicted first. A prompt's blocks are cached as it
arrives (the fake has no prefill to wait for), so a request that arrives while an identical one is
still "prefilling" already hits; a real engine may not. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tokenrace.fakes.fake_openai import count_tokens

BlockUnit: TypeAlias = Literal["tokens", "chars"]


@dataclass(frozen=True, slots=True)
class CacheLookup:
    """What one prompt found: cached tokens (toy tokenizer words) and whole blocks hit."""

    cached_tokens: int
    blocks_hit: int
    blocks_total: int


class PrefixCache:
    """Block-hash prefix cache with LRU eviction; `capacity_blocks=None` never evicts."""

    def __init__(self, block_size: int, unit: BlockUnit = "tokens", capacity_blocks: int | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if capacity_blocks is not None and capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
        self.block_size = block_size
        self.unit = unit
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        self._blocks.clear()

    def block_keys(self, text: str) -> list[bytes]:
        """The chained key of each whole block of `text` (a trailing partial block has none)."""
        keys: list[bytes] = []
        digest = b""
        for block in _blocks(text, self.block_size, self.unit):
            digest = hashlib.blake2b(digest + block.encode("utf-8"), digest_size=16).digest()
            keys.append(digest)
        return keys

    def lookup_and_insert(self, text: str) -> CacheLookup:
        """Count the cached prefix of `text`, then cache all its whole blocks (as a prefill would)."""
        keys = self.block_keys(text)
        hit = 0
        for key in keys:
            if key not in self._blocks:
                break
            hit += 1
        # Touch from the last block to the first, so the beginning of a prompt is the most
        # recently used and tails are evicted first: evicting a first block would orphan every
        # block after it (vLLM frees a request's blocks in reverse order for the same reason).
        for key in reversed(keys):
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        if self.capacity_blocks is not None:
            while len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)
        return CacheLookup(_tokens_in_prefix(text, hit * self.block_size, self.unit), hit, len(keys))


def _blocks(text: str, size: int, unit: BlockUnit) -> list[str]:
    if unit == "chars":
        return [text[i : i + size] for i in range(0, len(text) - size + 1, size)]
    words = text.split()
    # "\x1f" between words: ("ab", "c") and ("a", "bc") must not hash alike.
    return ["\x1f".join(words[i : i + size]) + "\x1f" for i in range(0, len(words) - size + 1, size)]


def _tokens_in_prefix(text: str, units: int, unit: BlockUnit) -> int:
    """Toy-tokenizer tokens inside the first `units` words or characters (a word cut in two is not cached)."""
    if unit == "tokens":
        return units
    if units == 0:
        return 0
    n = count_tokens(text[:units])
    if units < len(text) and not text[units - 1].isspace() and not text[units].isspace():
        n -= 1
    return n
