"""Precise prefix routing on a real vLLM's KV events: the session's vLLM (its CPU build, publishing
its KV-cache events) and one fake instance in a `scored` pool. Two real engines do not fit a 2-core
machine; the fake holds no blocks, so every request that shares the real engine's cached prefix
must go to the real one, and the gateway's own tokenization (tokenizer.json and the chat template
of the folder vLLM serves) must give the engine's token ids block for block, or the prefix would
not match.
"""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from tests.conftest import wait_until
from tests.gateway.helpers import GatewayThread, config_text, http
from tests.gateway.test_proxy import state
from tests.vllm.shared import SharedVllm

from tokenrace.fakes.fake_server import FakeServerThread

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # one vLLM for the session: a minute or two to start

SYSTEM = "You are a careful assistant. " + " ".join(
    f"Rule {i}: answer in plain words and check every number twice." for i in range(40)
)


def reset_prefix_cache(shared: SharedVllm) -> None:
    """Empty the engine's prefix cache (a development route): it publishes AllBlocksCleared."""
    request = urllib.request.Request(shared.engine.root + "/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.status == 200


def ask(gw: GatewayThread, model: str, question: str, headers: dict[str, str] | None = None) -> tuple[str, Any]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    body = {"model": model, "messages": messages, "max_tokens": 4}
    status, h, raw = http("POST", gw.base_url + "/chat/completions", body, headers=headers, timeout=300)
    assert status == 200, raw
    last = state(gw)["routes"][model]["targets"][0]["routing"]["last"]
    return h["x-tokenrace-backend"], last


def test_a_prompt_goes_to_the_real_engine_that_holds_its_prefix(shared_vllm: SharedVllm) -> None:
    model = shared_vllm.engine.model
    reset_prefix_cache(shared_vllm)  # nothing another test left cached counts here
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0, "output_tokens": 2, "models": [model]}) as fake:
        events = {
            "endpoint": shared_vllm.kv_events,
            "replay_endpoint": shared_vllm.kv_replay,
            "topic": shared_vllm.kv_topic,
        }
        backends = {
            "real": {
                "url": shared_vllm.engine.base_url,
                "kv_events": events,
                "timeouts": {"first_byte_s": 300, "total_s": 600},
            },
            "fake": {"url": fake.base_url},
        }
        scorers = {"prefix": 1, "queue": 0, "kv_cache": 0}
        pool = {
            "backend": ["real", "fake"],
            "policy": "scored",
            "tokenizer": str(shared_vllm.folder),
            "scorers": scorers,
        }
        route = {"model": model, "backends": [pool], "pin_header": "X-Tokenrace-Backend"}
        with GatewayThread(config_text(backends, [route])) as gw:

            def kv() -> dict[str, Any]:
                view: dict[str, Any] = state(gw)["backends"]["real"]["kv_events"]
                return view

            pin = {"X-Tokenrace-Backend": "real"}
            assert ask(gw, model, "What is 2+2?", pin)[0] == "real"  # fills the engine's cache
            wait_until(lambda: kv()["blocks"] > 0, 60, "the engine's stored blocks")
            held = kv()
            assert held["orphans"] == 0 and held["missed"] == 0 and held["bad"] == 0, held
            for question in ("What is 3+5?", "Name a colour.", "What is the capital of France?"):
                who, last = ask(gw, model, question)
                # Every whole block of the request is held by the engine: the gateway's tokens are the engine's.
                blocks = int(last["detail"].split()[1].split("/")[1])
                assert (
                    who == "real" and blocks >= 2 and last["detail"].startswith(f"prefix {blocks}/{blocks} blocks")
                ), last
                assert last["scores"] == {"real": 1.0, "fake": 0.0}, last
            # The engine's cache is reset: AllBlocksCleared, and the prefix is gone.
            cleared = kv()["cleared"]
            reset_prefix_cache(shared_vllm)
            # vLLM publishes the events its scheduler collected at its next step: give it one (a
            # prompt shorter than a block stores nothing).
            pinned = {"model": model, "prompt": "Say hi.", "max_tokens": 2}
            assert http("POST", gw.base_url + "/completions", pinned, headers=pin, timeout=300)[0] == 200
            wait_until(lambda: kv()["blocks"] == 0 and kv()["cleared"] > cleared, 60, "AllBlocksCleared")
            assert ask(gw, model, "Name a colour.")[1]["scores"] == {"real": 0.0, "fake": 0.0}
