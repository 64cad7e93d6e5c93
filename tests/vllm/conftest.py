"""One real vLLM (its CPU build, from .venv-vllm) for the whole test session.

vLLM takes about a minute to start on two cores, so every test marked `vllm` shares this one server.
It runs with what the tests look at turned on: ngram speculative decoding (drafts copied from the
prompt) and the cached prompt tokens in each response's usage. A test must not depend on what
another test sent before it, except through the counters it reads as deltas.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from tests.conftest import require

from tokenrace.serve.launch import RunningEngine, start_vllm_cpu
from tokenrace.serve.vllm_cpu import INSTALL_HINT, VllmCpuOptions, find_vllm_python

SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
FLAGS = ("--speculative-config", json.dumps(SPECULATIVE), "--enable-prompt-tokens-details")


@pytest.fixture(scope="session")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    require("vLLM's CPU build", find_vllm_python(), INSTALL_HINT)
    home = tmp_path_factory.mktemp("vllm-home")  # the converted model lives here, not in the user's data directory
    log = home / "vllm.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENRACE_HOME", str(home))
        engine = asyncio.run(start_vllm_cpu(VllmCpuOptions(max_num_seqs=4, extra=FLAGS), log_path=log))
    try:
        yield engine
    finally:
        engine.stop()
