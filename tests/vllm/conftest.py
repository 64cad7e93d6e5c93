"""One real vLLM (its CPU build, from .venv-vllm) for the whole test session.

vLLM takes about a minute to start on two cores, so every test marked `vllm` shares this one server.
It runs with what the tests look at turned on: ngram speculative decoding (drafts copied from the
prompt), the cached prompt tokens in each response's usage, its KV-cache events over ZMQ (a PUB
socket and a replay socket, for the gateway's precise prefix routing) and the development routes
(/reset_prefix_cache). A test must not depend on what another test sent before it, except through
the counters it reads as deltas.

The embedded model is converted once for the session (`vllm_home`), for every vLLM the tests start:
test_embeddings.py starts a second one, vLLM's pooling runner, for its module alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.conftest import require
from tests.vllm.shared import SharedVllm, VllmHome

from tokenrace.serve.embedded import default_model
from tokenrace.serve.launch import RunningEngine
from tokenrace.serve.vllm_cpu import INSTALL_HINT, VllmCpuOptions, converted, find_vllm_python

SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
FLAGS = ("--speculative-config", json.dumps(SPECULATIVE), "--enable-prompt-tokens-details")
KV_TOPIC = "kv"


@pytest.fixture(scope="session")
def vllm_home(tmp_path_factory: pytest.TempPathFactory) -> VllmHome:
    python = require("vLLM's CPU build", find_vllm_python(), INSTALL_HINT)
    home = tmp_path_factory.mktemp("vllm-home")  # the converted model lives here, not in the user's data directory
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENRACE_HOME", str(home))
        return VllmHome(home, converted(default_model(), python))


@pytest.fixture(scope="session")
def shared_vllm(vllm_home: VllmHome) -> Iterator[SharedVllm]:
    home = vllm_home.path
    # Unix sockets, not TCP: vLLM binds its PUB socket only to a wildcard address (`tcp://*:PORT`,
    # every interface) or an ipc:// path, and connects to any other one, so a local server's events
    # go through files in the session's folder.
    events, replay = (f"ipc://{home / name}" for name in ("kv-events.sock", "kv-replay.sock"))
    kv = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": KV_TOPIC}
    kv |= {"endpoint": events, "replay_endpoint": replay}
    flags = (*FLAGS, "--kv-events-config", json.dumps(kv))
    engine = vllm_home.start(VllmCpuOptions(max_num_seqs=4, extra=flags, dev_mode=True), "vllm.log")
    try:
        yield SharedVllm(engine, vllm_home.folder, events, replay, KV_TOPIC)
    finally:
        engine.stop()


@pytest.fixture
def vllm(shared_vllm: SharedVllm) -> RunningEngine:
    return shared_vllm.engine
