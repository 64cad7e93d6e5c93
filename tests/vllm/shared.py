"""What the session's one vLLM (tests/vllm/conftest.py) offers the tests beyond its HTTP routes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenrace.serve.launch import RunningEngine


@dataclass(frozen=True, slots=True)
class SharedVllm:
    engine: RunningEngine
    folder: Path  # the Hugging Face folder it serves: tokenizer.json and the chat template
    kv_events: str  # its KV-event PUB socket, ipc://PATH
    kv_replay: str  # the ROUTER socket that replays its recent event batches, ipc://PATH
    kv_topic: str  # the topic its events are published under
