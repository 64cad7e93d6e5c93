"""Following the engines' KV-cache events over ZMQ (vLLM's `--kv-events-config`), in the background.

One task per backend with `kv_events:` holds a SUB socket connected to the engine's PUB endpoint.
Each message is three frames: the topic, an 8-byte big-endian sequence number, and a msgpack
batch of events (`kvblocks.decode_batch`), applied to the backend's `InstanceBlocks`. A request
only reads what is known; it never waits for an event.

The stream's failures, as vLLM's `ZmqEventPublisher` defines them:
- **Slow joiner.** A SUB socket receives nothing published before its connection is up, so the
  first batch seen may not be the engine's first. With a `replay_endpoint` (the publisher's ROUTER,
  which keeps its last batches) the gateway asks for everything from sequence 0 and applies it
  before going on; without one the batches before are counted as `missed`.
- **Gaps.** A sequence number above the next expected one (the SUB socket dropped messages at its
  high-water mark, or the connection broke) is filled from the replay socket the same way: the
  request is the 8-byte first missing number, the answers `(topic, seq, payload)` (vLLM 0.32; no
  topic before) ending with sequence -1. What the replay no longer holds is `missed`, and the
  blocks stored in it that are parents of later ones make those later ones `orphans`.
- **Restart.** A sequence number below the expected one means the publisher started over: the
  engine restarted with an empty cache, so everything known of it is dropped (`restarts`), as an
  `AllBlocksCleared` event does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import zmq
import zmq.asyncio

from tokenrace.gateway.follow import PerBackend
from tokenrace.gateway.kvblocks import BadEvent, InstanceBlocks, decode_batch

if TYPE_CHECKING:
    from tokenrace.gateway.config import KVEventsConfig
    from tokenrace.gateway.runtime import Backend

log = logging.getLogger("tokenrace.gateway")
END_SEQ = -1  # the replay's last answer


class KVEvents(PerBackend):
    """The subscription tasks, kept in step with the backends the current runtime follows."""

    task_name = "kv-events"

    def __init__(self) -> None:
        super().__init__()
        self._ctx = zmq.asyncio.Context()

    async def close(self) -> None:
        await self.stop()
        self._ctx.destroy(linger=0)

    async def _forever(self, backend: Backend) -> None:
        config, blocks = backend.config.kv_events, backend.kv
        assert config is not None and blocks is not None
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, config.topic.encode("utf-8"))
        sub.connect(config.endpoint)
        try:
            while True:
                frames = await sub.recv_multipart()
                try:
                    await self._receive(frames, config, blocks)
                except (
                    zmq.ZMQError,
                    ValueError,
                ) as exc:  # a broken replay, a batch that decodes oddly: the next one may be fine
                    blocks.bad += 1
                    log.warning("kv events from %s: %s", config.endpoint, exc)
        finally:
            sub.close(linger=0)

    async def _receive(self, frames: list[bytes], config: KVEventsConfig, blocks: InstanceBlocks) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            blocks.bad += 1
            return
        seq = int.from_bytes(frames[1], "big", signed=True)
        expected = 0 if blocks.last_seq is None else blocks.last_seq + 1
        if seq < expected and blocks.last_seq is not None:
            blocks.restarts += 1  # the publisher's sequence started over: a new engine, an empty cache
            blocks.clear()
            blocks.last_seq = None
            expected = 0
        if seq > expected:
            if blocks.last_seq is not None:
                blocks.gaps += 1
            await self._fill(expected, seq, config, blocks)
        apply(blocks, seq, frames[2])

    async def _fill(self, start: int, upto: int, config: KVEventsConfig, blocks: InstanceBlocks) -> None:
        """Apply batches start..upto-1 from the publisher's replay socket; count what it cannot give."""
        got = 0
        if config.replay_endpoint is not None:
            got = await self._replay(start, upto, config, blocks)
        blocks.missed += upto - start - got

    async def _replay(self, start: int, upto: int, config: KVEventsConfig, blocks: InstanceBlocks) -> int:
        assert config.replay_endpoint is not None
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        got = 0
        try:
            sock.connect(config.replay_endpoint)
            # The ROUTER sees [identity, empty, start]: the empty frame is the request's delimiter.
            await sock.send_multipart([b"", start.to_bytes(8, "big")])
            async with asyncio.timeout(config.replay_timeout_s):
                while True:
                    answer = replay_answer(await sock.recv_multipart())
                    if answer is None:
                        blocks.bad += 1
                        continue
                    seq, payload = answer
                    if seq == END_SEQ:
                        break
                    if start <= seq < upto and (blocks.last_seq is None or seq > blocks.last_seq):
                        apply(blocks, seq, payload)
                        blocks.replayed += 1
                        got += 1
        except TimeoutError:
            log.warning(
                "kv events: no end of replay from %s within %s s", config.replay_endpoint, config.replay_timeout_s
            )
        finally:
            sock.close(linger=0)
        return got


def replay_answer(frames: list[bytes]) -> tuple[int, bytes] | None:
    """`(seq, payload)` of one replay answer as the DEALER socket receives it: the empty delimiter,
    then the topic (vLLM 0.32 sends it, an empty one with the end marker; earlier releases did
    not), the 8-byte sequence number and the batch. None: not an answer."""
    if len(frames) == 4:  # [b"", topic, seq, payload]
        frames = [frames[0], *frames[2:]]
    if len(frames) != 3 or frames[0] != b"" or len(frames[1]) != 8:
        return None
    return int.from_bytes(frames[1], "big", signed=True), frames[2]


def apply(blocks: InstanceBlocks, seq: int, payload: bytes) -> None:
    """One batch: its events applied, its sequence number remembered."""
    try:
        events = decode_batch(payload)
    except BadEvent:
        blocks.bad += 1
    else:
        blocks.apply(events)
        blocks.batches += 1
    blocks.last_seq = seq
