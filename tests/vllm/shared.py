"""What the session's one vLLM (tests/vllm/conftest.py) offers the tests beyond its HTTP routes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from tokenrace.serve.launch import RunningEngine, start_vllm_cpu
from tokenrace.serve.vllm_cpu import VllmCpuOptions


@dataclass(frozen=True, slots=True)
class VllmHome:
    """The session's data directory for vLLM: the embedded model converted once (about 30 s), for
    every server the tests start, and their logs and sockets."""

    path: Path
    folder: Path  # the Hugging Face folder made from the embedded GGUF: tokenizer.json, chat template

    def start(self, opts: VllmCpuOptions, log_name: str) -> RunningEngine:
        """A vLLM CPU server of the embedded model, ready; start_vllm_cpu finds the conversion here."""
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TOKENRACE_HOME", str(self.path))
            return asyncio.run(start_vllm_cpu(opts, log_path=self.path / log_name))


@dataclass(frozen=True, slots=True)
class SharedVllm:
    engine: RunningEngine
    folder: Path  # the Hugging Face folder it serves: tokenizer.json and the chat template
    kv_events: str  # its KV-event PUB socket, ipc://PATH
    kv_replay: str  # the ROUTER socket that replays its recent event batches, ipc://PATH
    kv_topic: str  # the topic its events are published under
