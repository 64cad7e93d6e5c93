"""The gateway in front of a real engine: llama.cpp's llama-server with SmolLM2-135M on this CPU."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from tests.gateway.helpers import CLIENT_KEY, GatewayThread, config_text, http, sse_events
from tests.integration.conftest import embedded_engine

from tokenrace.serve.launch import RunningEngine

pytestmark = pytest.mark.embedded


@pytest.fixture
def engine() -> Iterator[RunningEngine]:
    with embedded_engine(parallel=1, ctx_size=2048) as eng:  # its own: the test may kill it
        yield eng


def gateway_for(engine: RunningEngine) -> GatewayThread:
    backend = {"url": engine.base_url, "timeouts": {"first_byte_s": 60, "idle_s": 30}}
    return GatewayThread(config_text({"llama": backend}, [{"model": "smol", "backends": ["llama"]}])).__enter__()


def metric(url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_stream_and_a_whole_answer_pass_through_with_the_engines_usage(engine: RunningEngine) -> None:
    gw = gateway_for(engine)
    try:
        body = {
            "model": "smol",
            "messages": [{"role": "user", "content": "Name three colours."}],
            "max_tokens": 16,
            "temperature": 0,
        }
        status, headers, raw = http("POST", gw.url + "/v1/chat/completions", {**body, "stream": True}, timeout=120)
        events = sse_events(raw)
        assert status == 200 and headers["x-tokenrace-backend"] == "llama" and events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        assert text and all("usage" not in c or c["usage"] is None for c in chunks)  # the client did not ask for usage
        streamed_out = metric(gw.url, "tokenrace_gateway_tokens_total", direction="out")
        assert 1 <= streamed_out <= 16
        # the gateway asked the engine for usage on the client's behalf, and counted from it
        assert metric(gw.url, "tokenrace_gateway_tokens_total", direction="out", source="usage") == streamed_out
        status, _, raw = http("POST", gw.url + "/v1/chat/completions", {**body, "stream": False}, timeout=120)
        whole = json.loads(raw)
        assert status == 200 and whole["choices"][0]["message"]["content"] == text  # temperature 0: the same words
        assert (
            metric(gw.url, "tokenrace_gateway_tokens_total", direction="out")
            == streamed_out + whole["usage"]["completion_tokens"]
        )
    finally:
        gw.stop()


def test_an_engine_killed_mid_stream_ends_the_stream_with_an_error_event(engine: RunningEngine) -> None:
    gw = gateway_for(engine)
    try:
        body = {
            "model": "smol",
            "messages": [{"role": "user", "content": "Tell a long story about a lighthouse."}],
            "max_tokens": 1500,
            "stream": True,
        }
        request = urllib.request.Request(
            gw.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"},
        )
        events: list[Any] = []
        with urllib.request.urlopen(request, timeout=120) as resp:
            pid = engine.proc.pid
            assert pid is not None
            for line in resp:  # the answer as it arrives
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip().decode()
                events.append(data if data == "[DONE]" else json.loads(data))
                if len(events) == 5:
                    os.kill(pid, signal.SIGKILL)  # the engine dies after bytes have reached the client
        assert events[-1] == "[DONE]"
        last = events[-2]
        assert last["choices"][0]["finish_reason"] == "error" and last["error"]["code"] == "disconnect"
        assert last["usage"]["completion_tokens"] >= 3 and last["usage"]["completion_tokens_source"] == "chunks"
        assert metric(gw.url, "tokenrace_gateway_stream_errors_total", backend="llama") == 1
    finally:
        gw.stop()
