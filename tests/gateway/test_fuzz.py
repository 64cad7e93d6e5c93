"""Fuzzed request bodies: whatever a client sends, the gateway itself never answers 5xx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenrace.fakes.fake_server import FakeServerThread

from .helpers import GatewayThread, config_text, http


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewayThread]:
    with FakeServerThread({"ttft_ms": 0, "itl_ms": 0, "output_tokens": 2, "models": ["m"]}) as fake:
        text = config_text(
            {"a": {"url": fake.base_url, "timeouts": {"first_byte_s": 5, "total_s": 10}}},
            [{"model": "m", "backends": ["a"]}],
            limits={"max_body_bytes": 65536},
        )
        with GatewayThread(text) as gateway:
            yield gateway


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=30)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool", ""])}, optional={"content": values}
    ),
    max_size=3,
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.just("m"), st.just("m"), values),
        "messages": st.one_of(messages, values),
        "prompt": values,
        "stream": st.one_of(st.booleans(), values),
        "stream_options": st.one_of(st.just({"include_usage": True}), values),
        "max_tokens": st.one_of(st.integers(-5, 5), values),
        "temperature": values,
        "n": values,
    },
)


def gateway_made_it(headers: dict[str, str]) -> bool:
    return "x-tokenrace-backend" not in headers


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=bodies, path=st.sampled_from(["/chat/completions", "/completions"]))
def test_json_bodies(gw: GatewayThread, body: dict[str, Any], path: str) -> None:
    status, headers, raw = http("POST", gw.base_url + path, json.dumps(body).encode(), timeout=20)
    assert not (status >= 500 and gateway_made_it(headers)), (status, raw[:300])
    if status >= 400 and gateway_made_it(headers):
        assert "message" in json.loads(raw)["error"]


@pytest.mark.slow
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_arbitrary_bytes(gw: GatewayThread, raw: bytes) -> None:
    status, headers, reply = http("POST", gw.base_url + "/chat/completions", raw, timeout=20)
    assert status < 500 or not gateway_made_it(headers), (status, reply[:300])
