"""Precise prefix routing from vLLM's KV events: the wire format, the block index, the subscriber's
slow-joiner / gap / restart handling over real ZMQ sockets, the `scored` pool end to end, and the
pin header. The publisher is `FakeKVPublisher`: vLLM's sockets and bytes, with events the test
chooses."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from tokenrace.fakes.fake_kv_events import FakeKVPublisher, VLLMEvents
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.gateway.body import RequestBody
from tokenrace.gateway.config import BackendConfig, ConfigError, parse_config, resolve_secrets
from tokenrace.gateway.kvblocks import (
    BadEvent,
    Cleared,
    EngineHash,
    InstanceBlocks,
    Removed,
    Stored,
    chain_keys,
    decode_batch,
)
from tokenrace.gateway.kvevents import KVEvents
from tokenrace.gateway.prompt_tokens import PromptTokenizer
from tokenrace.gateway.routing import Candidate, Load, Weights, parse_load, scored
from tokenrace.gateway.runtime import Backend, Route, Runtime

from .helpers import ENV, GatewayThread, config_text
from .test_pool_routing import until
from .test_proxy import post, state

WORDS = [f"w{i}" for i in range(64)]
FAST = {"ttft_ms": 1, "itl_ms": 0, "output_tokens": 2, "models": ["m"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tcp() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


@pytest.fixture
def tokenizer_json(tmp_path: Path) -> Path:
    """A word-level tokenizer.json: `w<i>` is token i, whitespace splits."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)} | {"[UNK]": 64}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def text(ids: list[int]) -> str:
    return " ".join(WORDS[i] for i in ids)


# --- the wire and the index ------------------------------------------------------------------------


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kv_events"


def test_decodes_the_frames_a_real_vllm_published() -> None:
    recorded = json.loads((FIXTURES / "vllm-0.32.0-cpu.json").read_text())
    (topic, seq, payload) = (bytes.fromhex(f) for f in recorded["frames"][0])
    assert topic == b"kv" and int.from_bytes(seq, "big") == 0
    (event,) = decode_batch(payload)
    assert isinstance(event, Stored) and event.plain and event.parent is None and event.block_size == 128
    # 617 prompt tokens: four whole blocks stored; the engine's hashes are 64-bit ints in this release.
    assert len(event.hashes) == 4 and all(isinstance(h, int) for h in event.hashes) and len(event.tokens) == 512
    blocks = InstanceBlocks()
    blocks.apply([event])
    assert blocks.prefix(chain_keys([*event.tokens, 1, 2, 3], 128)) == 4
    # The fake publisher sends the same fields, in the same layout.
    fake = msgpack.unpackb(VLLMEvents(128).encode([VLLMEvents(128).stored(event.tokens)]))
    real = msgpack.unpackb(payload)
    assert list(fake[1][0]) == list(real[1][0]) and len(fake) == len(real)


@pytest.mark.parametrize("layout", ["map", "array"])
@pytest.mark.parametrize("int_hashes", [True, False], ids=["int-hashes", "bytes-hashes"])
def test_decodes_vllms_batches_in_both_layouts(layout: str, int_hashes: bool) -> None:
    pub = VLLMEvents(4, "map" if layout == "map" else "array", int_hashes)
    stored = pub.stored(list(range(10)))
    payload = pub.encode([stored, pub.removed(stored["block_hashes"][1:]), pub.cleared()])
    raw = msgpack.unpackb(payload)
    assert isinstance(raw, list) and len(raw) == 3  # [ts, events, data_parallel_rank]
    events = decode_batch(payload)
    assert events[0] == Stored(stored["block_hashes"], None, list(range(8)), 4, True)
    assert isinstance(stored["block_hashes"][0], int if int_hashes else bytes)
    assert events[1] == Removed(stored["block_hashes"][1:]) and events[2] == Cleared()
    with pytest.raises(BadEvent):
        decode_batch(b"\xc1")
    with pytest.raises(BadEvent):
        decode_batch(msgpack.packb([0.0, [["Unknown", []]], 0]))
    odd = {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": ["x"], "block_size": 1}
    with pytest.raises(BadEvent, match="not token ids"):
        decode_batch(msgpack.packb([0.0, [odd], 0]))


def test_the_index_follows_stores_removals_and_clears_by_its_own_chain_keys() -> None:
    blocks = InstanceBlocks()
    hashes: list[EngineHash] = [b"h1", b"h2", b"h3"]
    blocks.apply([Stored(hashes[:2], None, list(range(8)), 4, True)])
    blocks.apply([Stored(hashes[2:], b"h2", list(range(8, 12)), 4, True)])  # a later block of the same prompt
    request = chain_keys(list(range(14)), 4)
    assert len(request) == 3 and blocks.prefix(request) == 3 and len(blocks) == 3
    assert blocks.prefix(chain_keys([99, *range(1, 14)], 4)) == 0  # one token changed at the start: nothing
    blocks.apply([Removed([b"h2"])])
    assert blocks.prefix(request) == 1  # a hole: only the blocks before it count
    blocks.apply([Stored([b"h9"], b"unknown", list(range(4)), 4, True)])
    assert blocks.orphans == 1
    blocks.apply([Stored([b"h8"], None, list(range(4)), 4, False)])
    assert blocks.skipped == 1
    blocks.apply([Cleared()])
    assert len(blocks) == 0 and blocks.prefix(request) == 0


def test_the_scored_policy_weighs_prefix_queue_running_and_kv_cache() -> None:
    now = 100.0
    a = Candidate("a", 0, load=Load(now, 0, waiting=4, kv_usage=0.9, engine="vllm", running=8), prefix_blocks=9)
    b = Candidate("b", 0, load=Load(now, 0, waiting=0, kv_usage=0.1, engine="vllm", running=1), prefix_blocks=0)
    rng = random.Random(1)
    choice, scores = scored([a, b], now, Weights(prefix=2, queue=1, running=1, kv_cache=1), 10, rng)
    assert scores == {"a": 1.9, "b": 2.9} and choice.name == "b"  # b's idle engine beats a's 90 % prefix
    choice, _ = scored([a, b], now, Weights(prefix=5, queue=1, running=1, kv_cache=1), 10, rng)
    assert choice.name == "a" and choice.detail == "prefix 9/10 blocks"
    stale = Candidate("b", 0, load=Load(now - 50, 0, waiting=0, engine="vllm"), stale_s=3.0)
    choice, _ = scored([a, stale], now, Weights(), 10, rng)
    assert choice.name == "a" and choice.detail.endswith("load scores off: b: reading 50.0 s old")
    load = parse_load(
        "vllm:num_requests_waiting 2\nvllm:num_requests_running 3\nvllm:kv_cache_usage_perc 0.25\n", now, 0
    )
    assert (load.waiting, load.running, load.kv_usage) == (2, 3, 0.25)


def test_prompt_tokens_follow_the_tokenizer_and_the_chat_template(tokenizer_json: Path) -> None:
    (tokenizer_json.parent / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "{% for m in messages %}w1 {{ m['content'] }} w2 {% endfor %}"})
    )
    tok = PromptTokenizer(tokenizer_json.parent)
    assert tok.tokens(RequestBody({"prompt": "w5 w6"})) == [5, 6]
    assert tok.tokens(RequestBody({"prompt": [7, 8]})) == [7, 8]
    chat = RequestBody({"messages": [{"role": "user", "content": [{"type": "text", "text": "w3 w4"}]}]})
    assert tok.tokens(chat) == [1, 3, 4, 2]
    assert tok.tokens(RequestBody({"prompt": ["w1", "w2"]})) is None  # several prompts: nothing to match


# --- the subscriber over real sockets -----------------------------------------------------------------


def kv_backend(endpoint: str, replay: str | None) -> Backend:
    config = BackendConfig.model_validate(
        {"url": "http://127.0.0.1:9/v1", "kv_events": {"endpoint": endpoint, "topic": "kv", "replay_endpoint": replay}}
    )
    return Backend("a", config, None)


async def wait_for(check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("replay_topic", [True, False], ids=["vllm-0.32", "earlier"])
def test_a_slow_joiner_catches_up_from_the_replay_socket_and_fills_gaps(replay_topic: bool) -> None:
    async def run() -> None:
        endpoint, replay = tcp(), tcp()
        with FakeKVPublisher(endpoint, replay, topic="kv", replay_topic=replay_topic) as pub:
            prompt = list(range(16))
            pub.publish([pub.stored(prompt[:8])])  # before anyone listens: lost on the PUB socket
            parent = pub.block_hashes(prompt[:8])[-1]
            pub.publish([pub.stored(prompt[8:], parent)])
            await wait_for(lambda: pub.sent == 2)
            backend = kv_backend(endpoint, replay)
            events = KVEvents()
            events.follow([backend])
            kv = backend.kv
            # ZMQ's slow joiner: keep publishing until one batch gets through, as an engine would.
            while kv.batches < 3:
                pub.publish([pub.stored(list(range(40, 44)))])
                await asyncio.sleep(0.2)
            assert kv.replayed >= 2 and kv.missed == 0 and kv.gaps == 0
            assert kv.prefix(chain_keys(prompt, 4)) == 4  # the blocks published before it joined
            # A lost message (the SUB socket's high-water mark, a broken connection): replayed.
            pub.publish([pub.stored(list(range(50, 54)))], send=False)
            pub.publish([pub.removed(pub.block_hashes(prompt)[2:])])
            await wait_for(lambda: kv.gaps == 1 and kv.prefix(chain_keys(prompt, 4)) == 2)
            assert kv.prefix(chain_keys(list(range(50, 54)), 4)) == 1 and kv.missed == 0
            await events.close()

    asyncio.run(run())


def test_without_a_replay_socket_gaps_are_counted_and_a_restart_drops_the_instances_blocks() -> None:
    async def run() -> None:
        endpoint = tcp()
        backend = kv_backend(endpoint, None)
        kv = backend.kv
        events = KVEvents()
        events.follow([backend])
        with FakeKVPublisher(endpoint, topic="kv") as pub:
            while kv.batches == 0:
                pub.publish([pub.stored(list(range(8)))])
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.3)
            lost_at_join = kv.missed  # the batches sent before the subscription was up
            assert lost_at_join == (kv.last_seq or 0) - kv.batches + 1 and kv.gaps == 0
            pub.publish([pub.stored(list(range(20, 24)))], send=False)
            pub.publish([pub.stored(list(range(30, 34)))])
            await wait_for(lambda: kv.gaps == 1)
            assert kv.missed == lost_at_join + 1 and kv.prefix(chain_keys(list(range(30, 34)), 4)) == 1
            assert kv.prefix(chain_keys(list(range(20, 24)), 4)) == 0
        # The engine restarts on the same port: its sequence starts over, its cache is empty.
        with FakeKVPublisher(endpoint, topic="kv") as pub:
            while kv.restarts == 0:
                pub.publish([pub.stored(list(range(60, 64)))])
                await asyncio.sleep(0.2)
            await wait_for(lambda: kv.prefix(chain_keys(list(range(60, 64)), 4)) == 1)
            assert kv.prefix(chain_keys(list(range(8)), 4)) == 0 and kv.prefix(chain_keys(list(range(30, 34)), 4)) == 0
            pub.publish([pub.cleared()])
            await wait_for(lambda: kv.cleared == 2 and not kv.prefix(chain_keys(list(range(60, 64)), 4)))
        await events.close()

    asyncio.run(run())


# --- the gateway ------------------------------------------------------------------------------------------


def served(gw: GatewayThread, prompt: str, **kw: Any) -> str:
    status, headers, raw = post(gw, {"model": "m", "prompt": prompt, "max_tokens": 2}, "/completions", **kw)
    assert status == 200, raw
    return headers["x-tokenrace-backend"]


def test_a_scored_pool_sends_a_prompt_to_the_instance_holding_its_prefix(
    tokenizer_json: Path, gateway: Callable[..., GatewayThread]
) -> None:
    ends = {n: (tcp(), tcp()) for n in "ab"}
    with (
        FakeServerThread(FAST) as fa,
        FakeServerThread(FAST) as fb,
        FakeKVPublisher(*ends["a"], topic="kv") as pa,
        FakeKVPublisher(*ends["b"], topic="kv") as pb,
    ):
        backends = {
            n: {"url": f.base_url, "kv_events": {"endpoint": ends[n][0], "replay_endpoint": ends[n][1], "topic": "kv"}}
            for n, f in (("a", fa), ("b", fb))
        }
        pool = {
            "backend": ["a", "b"],
            "policy": "scored",
            "tokenizer": str(tokenizer_json),
            "scorers": {"prefix": 1, "queue": 0, "kv_cache": 0},
        }
        gw = gateway(backends, [{"model": "m", "backends": [pool], "pin_header": "X-Tokenrace-Backend"}])
        system = list(range(1, 17))  # four blocks of a shared beginning

        def shown(name: str) -> dict[str, Any]:
            view: dict[str, Any] = state(gw)["backends"][name]["kv_events"]
            return view

        give_up = time.monotonic() + 60  # generous: a loaded machine
        while shown("b")["blocks"] < 4 or shown("a")["blocks"] < 1:  # slow joiner: publish until it is seen
            assert time.monotonic() < give_up, (shown("a"), shown("b"))
            pb.publish([pb.stored(system)])
            pa.publish([pa.stored(list(range(40, 44)))])
            time.sleep(0.3)
        assert {served(gw, text(system + [20 + i, 21, 22])) for i in range(6)} == {"b"}
        routing = state(gw)["routes"]["m"]["targets"][0]["routing"]
        assert routing["last"]["reason"] == "scored" and routing["last"]["detail"] == "prefix 4/4 blocks"
        assert routing["last"]["scores"] == {"a": 0.0, "b": 1.0} and routing["scorers"]["prefix"] == 1
        # a holds a longer prefix of another prompt: that one goes to a.
        pa.publish([pa.stored(system[:4] + list(range(30, 42)))])
        until(lambda: shown("a")["blocks"] >= 5, 60)
        assert served(gw, text(system[:4] + list(range(30, 42)))) == "a"
        # b evicts the beginning: the prompt's prefix there is gone, and a's first block wins.
        pb.publish([pb.removed(pb.block_hashes(system)[:1])])
        until(lambda: shown("b")["blocks"] == 3, 60)
        assert served(gw, text(system)) == "a"
        # The pin header overrides the scores, and a name the route does not have is refused.
        assert served(gw, text(system[:4] + list(range(30, 42))), headers={"X-Tokenrace-Backend": "b"}) == "b"
        status, _, raw = post(gw, {"model": "m", "prompt": "w1"}, "/completions", headers={"X-Tokenrace-Backend": "c"})
        assert status == 400 and json.loads(raw)["error"]["code"] == "unknown_backend"


def test_the_pin_header_is_read_by_the_gateway_and_not_forwarded() -> None:
    text_ = config_text(
        {"a": {"url": "http://127.0.0.1:9/v1"}, "b": {"url": "http://127.0.0.1:8/v1"}},
        [{"model": "m", "backends": ["a"], "fallback": ["b"], "pin_header": "X-Pin"}],
    )
    config = parse_config(text_, "t.yaml", ENV)
    route = Route(config.routes[0], {n: Backend(n, c, None) for n, c in config.backends.items()}, config.retry, None)
    assert sorted(route.pins) == ["a", "b"]
    assert route.forward.lines({"x-pin": "a", "x-trace": "1"}, route.own_headers) == b"x-trace: 1\r\n"
    for bad in ("Authorization", "x-*"):
        with pytest.raises(ConfigError):
            parse_config(
                config_text({"a": {"url": "http://h/v1"}}, [{"model": "m", "backends": ["a"], "pin_header": bad}]),
                "t.yaml",
                ENV,
            )
    with pytest.raises(ConfigError, match="tokenizer"):
        parse_config(
            config_text(
                {"a": {"url": "http://h/v1"}},
                [{"model": "m", "backends": [{"backend": ["a"], "tokenizer": "/nonexistent"}]}],
            ),
            "t.yaml",
            ENV,
        )


def test_a_tokenizer_file_that_does_not_read_is_a_configuration_error(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    pool = {"backend": ["a", "b"], "policy": "scored", "tokenizer": str(bad)}
    text_ = config_text(
        {"a": {"url": "http://h/v1"}, "b": {"url": "http://i/v1"}}, [{"model": "m", "backends": [pool]}]
    )
    config = parse_config(text_, "t.yaml", ENV)  # the file is there: the schema lets it through
    with pytest.raises(ConfigError, match="cannot read it as a tokenizer.json"):
        Runtime(config, resolve_secrets(config, ENV), 1)
