"""Which prompt blocks each engine instance holds, learned from vLLM's KV-cache events. Pure: no I/O.

vLLM (`--kv-events-config`, `vllm/distributed/kv_events.py`) publishes a batch of events each time
its KV cache changes: `BlockStored` (full blocks of a prompt now cached: the engine's hash of each,
its parent's hash, the blocks' token ids, the block size), `BlockRemoved` (hashes evicted) and
`AllBlocksCleared` (the prefix cache was reset). A batch is msgpack: vLLM encodes it with msgspec,
the batch as an array `[ts, events, data_parallel_rank]` (a map with those keys in releases that
dropped `array_like`), each event a tagged union: an array whose first element is the class name
(`["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, ...]`),
or a map with the class name under `type`. `decode_batch` reads both.

What is matched: the engine's block hashes cannot be recomputed here (vLLM seeds the first block's
parent with `os.urandom(32)` unless PYTHONHASHSEED is set, and its hash function is a setting), so,
as llm-d's KV-cache indexer does, the gateway keys each block by its own chain hash computed from
the token ids the event carries: `key(block) = blake2b-64(key(parent) || the block's token ids)`,
the first block's parent being a fixed root. A request's prompt, tokenized by the gateway with the
model's own tokenizer, gets the same chain over its whole blocks (`chain_keys`), and an instance's
prefix is the number of leading request blocks it holds. The engine's hashes are kept only to map
`BlockRemoved` (hashes without tokens) back to keys, and a stored block whose parent the gateway
never saw (events missed) cannot be placed in a chain and is counted as `orphans`.

Blocks stored with a LoRA adapter or extra keys (multimodal inputs, a cache salt) are not indexed:
a plain prompt's chain could not name them, and a request with those keys is not matched either.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

ROOT_KEY = 0  # the chain's parent of every prompt's first block
EngineHash = (
    bytes | int
)  # vLLM's ExternalBlockHash: 32 bytes of sha256, or an int (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES)


class BadEvent(ValueError):
    """A payload that is not a KV-event batch vLLM could have sent."""


@dataclass(frozen=True, slots=True)
class Stored:
    hashes: list[EngineHash]
    parent: EngineHash | None
    tokens: list[int]
    block_size: int
    plain: bool  # no LoRA and no extra keys: the blocks of a plain prompt


@dataclass(frozen=True, slots=True)
class Removed:
    hashes: list[EngineHash]


@dataclass(frozen=True, slots=True)
class Cleared:
    pass


Event = Stored | Removed | Cleared

# The fields of each event in vLLM's declaration order (the array form is positional, the tag first;
# trailing fields at their defaults are left out by msgspec's omit_defaults).
_STORED = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
)
_REMOVED = ("block_hashes", "medium")


def decode_batch(payload: bytes) -> list[Event]:
    """The events of one published batch (either of vLLM's encodings); BadEvent if it is not one."""
    try:
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise BadEvent(f"not msgpack: {exc}") from None
    if isinstance(batch, dict):
        events = batch.get("events")
    elif isinstance(batch, list) and len(batch) >= 2:
        events = batch[1]
    else:
        raise BadEvent("not an event batch")
    if not isinstance(events, list):
        raise BadEvent("the batch has no list of events")
    return [_event(e) for e in events]


def _event(raw: Any) -> Event:
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag = raw[0]
        fields = dict(zip(_STORED if tag == "BlockStored" else _REMOVED, raw[1:], strict=False))
    elif isinstance(raw, dict) and isinstance(raw.get("type"), str):
        tag, fields = raw["type"], raw
    else:
        raise BadEvent("an event is neither a tagged array nor a tagged map")
    if tag == "AllBlocksCleared":
        return Cleared()
    hashes = fields.get("block_hashes")
    if not isinstance(hashes, list) or not all(isinstance(h, bytes | int) for h in hashes):
        raise BadEvent(f"{tag}: block_hashes is not a list of hashes")
    if tag == "BlockRemoved":
        return Removed(hashes)
    if tag != "BlockStored":
        raise BadEvent(f"unknown event {tag!r}")
    tokens, size, parent = fields.get("token_ids"), fields.get("block_size"), fields.get("parent_block_hash")
    if not isinstance(tokens, list) or not isinstance(size, int) or size < 1:
        raise BadEvent("BlockStored: token_ids or block_size missing")
    if not all(isinstance(t, int) and 0 <= t < 2**32 for t in tokens):
        raise BadEvent("BlockStored: token_ids are not token ids")
    if parent is not None and not isinstance(parent, bytes | int):
        raise BadEvent("BlockStored: parent_block_hash is not a hash")
    extra = fields.get("extra_keys")
    plain = (
        fields.get("lora_id") is None
        and fields.get("lora_name") is None
        and (extra is None or (isinstance(extra, list) and all(e is None for e in extra)))
    )
    return Stored(hashes, parent, tokens, size, plain)


def chain_keys(tokens: Sequence[int], block_size: int, parent: int = ROOT_KEY) -> list[int]:
    """The chained 64-bit key of each whole block of `tokens` (a trailing partial block has none)."""
    keys: list[int] = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tokens[start : start + block_size]
        digest = hashlib.blake2b(
            parent.to_bytes(8, "big") + struct.pack(f"<{block_size}I", *block), digest_size=8
        ).digest()
        parent = int.from_bytes(digest, "big")
        keys.append(parent)
    return keys


class InstanceBlocks:
    """The blocks one instance holds, as chain keys; kept in step by `apply`."""

    __slots__ = (
        "_by_engine",
        "_held",
        "block_size",
        "orphans",
        "skipped",
        "cleared",
        "batches",
        "last_seq",
        "gaps",
        "replayed",
        "missed",
        "restarts",
        "bad",
    )

    def __init__(self) -> None:
        self._by_engine: dict[EngineHash, int] = {}  # engine hash -> chain key
        self._held: dict[int, int] = {}  # chain key -> engine blocks holding it (groups of a hybrid model)
        self.block_size: int | None = None  # the engine's, from its first BlockStored
        self.orphans = 0  # stored blocks whose parent was never seen (events missed)
        self.skipped = 0  # stored blocks with a LoRA or extra keys (not indexed)
        self.cleared = 0  # AllBlocksCleared events and restarts
        # The event stream's health, kept by its subscriber (kvevents.py):
        self.batches = 0  # batches applied
        self.last_seq: int | None = None  # the last batch's sequence number
        self.gaps = 0  # jumps in the sequence numbers
        self.replayed = 0  # batches recovered from the replay socket
        self.missed = 0  # batches lost for good
        self.restarts = 0  # the sequence started over (the engine restarted)
        self.bad = 0  # messages that were not event batches

    def __len__(self) -> int:
        return len(self._held)

    def apply(self, events: Sequence[Event]) -> None:
        for event in events:
            if isinstance(event, Stored):
                self._store(event)
            elif isinstance(event, Removed):
                for h in event.hashes:
                    self._drop(h)
            else:
                self.clear()

    def clear(self) -> None:
        self._by_engine.clear()
        self._held.clear()
        self.cleared += 1

    def _store(self, event: Stored) -> None:
        if not event.plain:
            self.skipped += len(event.hashes)
            return
        parent = ROOT_KEY if event.parent is None else self._by_engine.get(event.parent)
        if parent is None:
            self.orphans += len(event.hashes)
            return
        self.block_size = event.block_size
        keys = chain_keys(event.tokens, event.block_size, parent)
        for engine_hash, key in zip(event.hashes, keys, strict=False):
            old = self._by_engine.get(engine_hash)
            if old == key:
                continue  # stored again (at-least-once delivery, a replay): already counted
            if old is not None:
                self._drop(engine_hash)
            self._by_engine[engine_hash] = key
            self._held[key] = self._held.get(key, 0) + 1

    def _drop(self, engine_hash: EngineHash) -> None:
        key = self._by_engine.pop(engine_hash, None)
        if key is None:
            return
        left = self._held.get(key, 0) - 1
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)

    def prefix(self, keys: Sequence[int]) -> int:
        """How many of the leading `keys` (a request's chain) this instance holds."""
        held = self._held
        n = 0
        for key in keys:
            if key not in held:
                break
            n += 1
        return n
