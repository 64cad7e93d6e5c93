"""Precise prefix routing on a real vLLM's KV events: one real vLLM (its CPU build) and one fake
instance in a `scored` pool. Two real engines do not fit a 2-core machine; the fake holds no
blocks, so every request that shares the real engine's cached prefix must go to the real one, and
the gateway's own tokenization (tokenizer.json and chat template) must give the engine's token ids
block for block, or the prefix would not match.

Needs vLLM's CPU build in `.venv-vllm` (`scripts/setup.sh --engines`; or TOKENRACE_VLLM_PYTHON)
and the model as a Hugging Face folder (TOKENRACE_VLLM_MODEL).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tokenrace.testing.fake_server import FakeServerThread

from .helpers import ROOT, GatewayThread, config_text, http
from .test_kv_events import free_port
from .test_pool_routing import until
from .test_proxy import state

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # vLLM starts in a minute or two on 2 cores

VLLM_PYTHON = Path(os.environ.get("TOKENRACE_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
MODEL = os.environ.get("TOKENRACE_VLLM_MODEL")
SYSTEM = "You are a careful assistant. " + " ".join(
    f"Rule {i}: answer in plain words and check every number twice." for i in range(40)
)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if not VLLM_PYTHON.is_file() or MODEL is None:
        pytest.skip("needs vLLM's CPU build (.venv-vllm or TOKENRACE_VLLM_PYTHON) and TOKENRACE_VLLM_MODEL")
    port, pub, replay = free_port(), free_port(), free_port()
    events = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv"}
    events |= {"endpoint": f"tcp://*:{pub}", "replay_endpoint": f"tcp://*:{replay}"}
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"}  # dev mode: /reset_prefix_cache
    args = ["-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--served-model-name", "m"]
    args += ["--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--max-model-len", "2048"]
    args += ["--kv-events-config", json.dumps(events)]
    with log.open("wb") as out:
        proc = subprocess.Popen([str(VLLM_PYTHON), *args], stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + 600  # a loaded 2-core machine: minutes
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < give_up, "vLLM did not start: " + log.read_text()[-3000:]
            time.sleep(1)
        yield {"url": url, "pub": f"tcp://127.0.0.1:{pub}", "replay": f"tcp://127.0.0.1:{replay}"}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def ask(gw: GatewayThread, question: str, headers: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    status, h, raw = http(
        "POST",
        gw.base_url + "/chat/completions",
        {"model": "m", "messages": messages, "max_tokens": 4},
        headers=headers,
    )
    assert status == 200, raw
    last = state(gw)["routes"]["m"]["targets"][0]["routing"]["last"]
    return h["x-tokenrace-backend"], last


def test_a_prompt_goes_to_the_real_engine_that_holds_its_prefix(vllm: dict[str, str]) -> None:
    assert MODEL is not None
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0, "output_tokens": 2, "models": ["m"]}) as fake:
        backends = {
            "real": {
                "url": vllm["url"] + "/v1",
                "kv_events": {"endpoint": vllm["pub"], "replay_endpoint": vllm["replay"], "topic": "kv"},
                "timeouts": {"first_byte_s": 300, "total_s": 600},
            },
            "fake": {"url": fake.base_url},
        }
        scorers = {"prefix": 1, "queue": 0, "kv_cache": 0}
        pool = {"backend": ["real", "fake"], "policy": "scored", "tokenizer": MODEL, "scorers": scorers}
        route = {"model": "m", "backends": [pool], "pin_header": "X-Tokenrace-Backend"}
        with GatewayThread(config_text(backends, [route])) as gw:

            def kv() -> dict[str, Any]:
                view: dict[str, Any] = state(gw)["backends"]["real"]["kv_events"]
                return view

            assert ask(gw, "What is 2+2?", {"X-Tokenrace-Backend": "real"})[0] == "real"  # fills the engine's cache
            until(lambda: kv()["blocks"] > 0, 60)
            held = kv()
            assert held["orphans"] == 0 and held["missed"] == 0 and held["bad"] == 0
            for question in ("What is 3+5?", "Name a colour.", "What is the capital of France?"):
                who, last = ask(gw, question)
                # Every whole block of the request is held by the engine: the gateway's tokens are the engine's.
                blocks = int(last["detail"].split()[1].split("/")[1])
                assert who == "real" and blocks >= 2 and last["detail"].startswith(f"prefix {blocks}/{blocks} blocks")
                assert last["scores"] == {"real": 1.0, "fake": 0.0}
            # The engine's cache is reset: AllBlocksCleared, and the prefix is gone.
            with urllib.request.urlopen(
                urllib.request.Request(vllm["url"] + "/reset_prefix_cache", method="POST")
            ) as r:
                assert r.status == 200
            # vLLM publishes the events its scheduler collected at its next step: give it one (a
            # prompt shorter than a block stores nothing).
            pinned = {"model": "m", "prompt": "Say hi.", "max_tokens": 2}
            assert http("POST", gw.base_url + "/completions", pinned, headers={"X-Tokenrace-Backend": "real"})[0] == 200
            until(lambda: kv()["blocks"] == 0 and kv()["cleared"] >= 1, 60)
            assert ask(gw, "Name a colour.")[1]["scores"] == {"real": 0.0, "fake": 0.0}
