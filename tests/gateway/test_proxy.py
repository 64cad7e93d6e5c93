"""The gateway end to end against real fake OpenAI servers on loopback: pass-through, retries,
fallback order, breakers, mid-stream failures, model mapping, usage accounting."""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

import orjson
import pytest
from tests.conftest import wait_until

from tokenrace.fakes.blackhole import blackhole
from tokenrace.fakes.fake_server import FakeServerThread

from .helpers import ADMIN_KEY, GatewayThread, SteppedClock, chat, http, sse_events

FAST_RETRY = {"attempts": 2, "backoff_ms": 1, "max_backoff_ms": 5}


def post(
    gw: GatewayThread, body: dict[str, Any], path: str = "/chat/completions", **kw: Any
) -> tuple[int, dict[str, str], bytes]:
    return http("POST", gw.base_url + path, body, **kw)


def metric_lines(gw: GatewayThread, name: str) -> list[str]:
    _, _, raw = http("GET", gw.url + "/metrics", key=None)
    return [line for line in raw.decode().splitlines() if line.startswith(name)]


def metric(gw: GatewayThread, name: str, **labels: str) -> float:
    """The value of one sample; 0 if absent."""
    for line in metric_lines(gw, name):
        head, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in head for k, v in labels.items()) and (head == name or head.startswith(name + "{")):
            return float(value)
    return 0.0


def state(gw: GatewayThread) -> dict[str, Any]:
    status, _, raw = http("GET", gw.url + "/admin/state", key=ADMIN_KEY)
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


def backend(fake: FakeServerThread, **extra: Any) -> dict[str, Any]:
    return {"url": fake.base_url, **extra}


# --- pass-through ---------------------------------------------------------------------------------


def test_stream_passes_through_event_for_event(fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any) -> None:
    a, _ = fakes
    gw = gateway({"a": backend(a)}, [{"model": "m", "backends": ["a"]}])
    status, headers, raw = post(gw, chat(stream_options={"include_usage": True}))
    assert (
        status == 200
        and headers["Content-Type"].startswith("text/event-stream")
        and headers["x-tokenrace-backend"] == "a"
    )
    events = sse_events(raw)
    direct = sse_events(
        http("POST", a.base_url + "/chat/completions", chat(stream_options={"include_usage": True}), key=None)[2]
    )
    shape = lambda evs: [sorted(orjson.loads(e)) if e != "[DONE]" else e for e in evs]
    assert shape(events) == shape(direct) and events[-1] == "[DONE]"
    assert orjson.loads(events[-2])["usage"]["completion_tokens"] == 8
    assert metric(gw, "tokenrace_gateway_requests_total", route="m", backend="a", status="200") == 1
    assert metric(gw, "tokenrace_gateway_tokens_total", direction="out", source="usage") == 8
    assert metric(gw, "tokenrace_gateway_ttft_seconds_count", route="m", backend="a") == 1
    assert metric(gw, "tokenrace_gateway_tpot_seconds_count", route="m", backend="a") == 1


def test_usage_is_asked_for_but_not_shown_to_a_client_that_did_not_ask(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    a, _ = fakes
    gw = gateway({"a": backend(a)}, [{"model": "m", "backends": ["a"]}])
    _, _, raw = post(gw, chat())
    bodies = [orjson.loads(e) for e in sse_events(raw)[:-1]]
    assert all(b["choices"] for b in bodies)  # no usage-only chunk with empty choices
    assert metric(gw, "tokenrace_gateway_tokens_total", direction="in", source="usage") == 2  # "hello there"
    assert metric(gw, "tokenrace_gateway_tokens_total", direction="out", source="usage") == 8


def test_non_streaming_and_completions_pass_through_as_is(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    a, _ = fakes
    gw = gateway({"a": backend(a)}, [{"model": "m", "backends": ["a"]}])
    status, headers, raw = post(gw, chat(stream=False))
    body = orjson.loads(raw)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert (
        body["choices"][0]["message"]["content"] == "w0 w1 w2 w3 w4 w5 w6 w7 "
        and body["usage"]["completion_tokens"] == 8
    )
    status, _, raw = post(gw, {"model": "m", "prompt": "hi", "max_tokens": 3}, "/completions")
    assert status == 200 and orjson.loads(raw)["choices"][0]["text"] == "w0 w1 w2 "
    status, _, raw = post(gw, {"model": "m", "prompt": "hi", "stream": True, "max_tokens": 2}, "/completions")
    assert [orjson.loads(e)["choices"][0]["text"] for e in sse_events(raw)[:-1]] == ["w0 ", "w1 "]


def test_public_model_names_map_to_each_backends_own(gateway: Any) -> None:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0, "output_tokens": 2, "models": ["org/Real-Model-8B"]}) as real:
        gw = gateway({"r": backend(real, models={"m": "org/Real-Model-8B"})}, [{"model": "m", "backends": ["r"]}])
        status, _, raw = post(gw, chat())
        assert status == 200 and orjson.loads(sse_events(raw)[0])["model"] == "org/Real-Model-8B"
        status, _, raw = http("GET", gw.base_url + "/models")
        assert status == 200 and [m["id"] for m in orjson.loads(raw)["data"]] == ["m"]


def test_backend_client_errors_are_passed_on_without_retry(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    a, b = fakes
    gw = gateway(
        {"a": backend(a), "b": backend(b)}, [{"model": "m", "backends": ["a"], "fallback": ["b"]}], retry=FAST_RETRY
    )
    status, headers, raw = post(gw, chat(max_tokens=-1))
    assert (
        status == 400
        and "max_tokens must be a positive integer" in raw.decode()
        and headers["x-tokenrace-backend"] == "a"
    )
    assert len(a.log()) == 1 and len(b.log()) == 0


# --- retries, fallback, breakers ---------------------------------------------------------------------


def test_retry_then_fallback_in_order(fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any) -> None:
    a, b = fakes
    gw = gateway(
        {"a": backend(a, headers={"x-fake-fault": "500"}), "b": backend(b)},
        [{"model": "m", "backends": ["a"], "fallback": ["b"]}],
        retry=FAST_RETRY,
    )
    status, headers, raw = post(gw, chat())
    assert status == 200 and headers["x-tokenrace-backend"] == "b" and sse_events(raw)[-1] == "[DONE]"
    assert [e["status"] for e in a.log()] == [500, 500] and [e["status"] for e in b.log()] == [200]
    assert a.log()[1]["arrival_ns"] < b.log()[0]["arrival_ns"]
    assert metric(gw, "tokenrace_gateway_retries_total", route="m", backend="a") == 1
    assert metric(gw, "tokenrace_gateway_fallbacks_total", from_backend="a", to_backend="b") == 1
    assert metric(gw, "tokenrace_gateway_upstream_attempts_total", backend="a", outcome="5xx") == 2


@pytest.mark.slow
def test_retry_after_is_respected_or_skipped_when_too_long(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    a, b = fakes
    backends = {"a": backend(a, headers={"x-fake-fault": "429"}), "b": backend(b)}  # the fake says Retry-After: 1
    patient = gateway(
        backends, [{"model": "m", "backends": ["a"], "fallback": ["b"]}], retry={**FAST_RETRY, "retry_after_max_s": 5}
    )
    t = time.monotonic()
    status, _, _ = post(patient, chat())
    assert status == 200 and time.monotonic() - t >= 1.0 and len(a.log()) == 2
    a.reset()
    hasty = gateway(
        backends, [{"model": "m", "backends": ["a"], "fallback": ["b"]}], retry={**FAST_RETRY, "retry_after_max_s": 0.5}
    )
    t = time.monotonic()
    status, _, _ = post(hasty, chat())
    assert status == 200 and time.monotonic() - t < 0.9 and len(a.log()) == 1


def test_connection_refused_falls_back_and_all_failing_passes_the_last_error(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    a, b = fakes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        gw = gateway(
            {"dead": {"url": dead}, "b": backend(b)},
            [{"model": "m", "backends": ["dead"], "fallback": ["b"]}],
            retry=FAST_RETRY,
        )
        status, headers, _ = post(gw, chat())
        assert status == 200 and headers["x-tokenrace-backend"] == "b"
        assert metric(gw, "tokenrace_gateway_upstream_attempts_total", backend="dead", outcome="connect") == 2
        alone = gateway({"dead": {"url": dead}}, [{"model": "m", "backends": ["dead"]}], retry=FAST_RETRY)
        status, _, raw = post(alone, chat())
        error = orjson.loads(raw)["error"]
        assert status == 502 and error["code"] == "upstream_unavailable" and "cannot connect" in error["message"]
    failing = gateway(
        {"a": backend(a, headers={"x-fake-fault": "500"})}, [{"model": "m", "backends": ["a"]}], retry=FAST_RETRY
    )
    status, headers, raw = post(failing, chat())
    assert status == 500 and "Injected fault" in raw.decode() and headers["x-tokenrace-backend"] == "a"


@pytest.mark.slow
def test_a_backend_whose_connects_hang_times_out_and_falls_back(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    _, b = fakes
    with blackhole() as port:
        hung = {"url": f"http://127.0.0.1:{port}/v1", "timeouts": {"connect_s": 0.3}}
        gw = gateway(
            {"hung": hung, "b": backend(b)}, [{"model": "m", "backends": ["hung"], "fallback": ["b"]}], retry=FAST_RETRY
        )
        t = time.monotonic()
        status, headers, _ = post(gw, chat())
        assert status == 200 and headers["x-tokenrace-backend"] == "b"
        assert 0.5 <= time.monotonic() - t < 10  # two attempts of 0.3 s each, then the fallback
        assert metric(gw, "tokenrace_gateway_upstream_attempts_total", backend="hung", outcome="connect") == 2
        alone = gateway({"hung": hung}, [{"model": "m", "backends": ["hung"]}], retry=FAST_RETRY)
        status, _, raw = post(alone, chat())
    error = orjson.loads(raw)["error"]
    assert (
        status == 502
        and error["code"] == "upstream_unavailable"
        and "connect timed out after 0.3 s" in error["message"]
    )


def test_a_connection_dropped_before_any_byte_is_retried(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    a, b = fakes
    gw = gateway(
        {"a": backend(a, headers={"x-fake-fault": "refuse"}), "b": backend(b)},
        [{"model": "m", "backends": ["a"], "fallback": ["b"]}],
        retry=FAST_RETRY,
    )
    status, headers, _ = post(gw, chat())
    assert status == 200 and headers["x-tokenrace-backend"] == "b"
    assert metric(gw, "tokenrace_gateway_upstream_attempts_total", backend="a", outcome="disconnect") == 2


def test_breaker_opens_shows_why_and_until_then_probes(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any, gateway_clock: SteppedClock
) -> None:
    a, b = fakes
    gw = gateway(
        {
            "a": backend(
                a, headers={"x-fake-fault": "500"}, breaker={"failures": 2, "open_s": 0.5, "error_rate": None}
            ),
            "b": backend(b),
        },
        [{"model": "m", "backends": ["a"], "fallback": ["b"]}],
        retry=FAST_RETRY,
    )
    assert post(gw, chat())[0] == 200
    snap = state(gw)["backends"]["a"]["breaker"]
    assert snap["state"] == "open" and snap["reason"] == "2 consecutive failures (last: 5xx)"
    assert snap["open_until_unix"] > time.time()
    assert metric(gw, "tokenrace_gateway_breaker_state", backend="a") == 2
    assert metric(gw, "tokenrace_gateway_breaker_open_until_seconds", backend="a") > time.time()
    before = len(a.log())
    assert post(gw, chat())[0] == 200 and len(a.log()) == before  # skipped while open
    assert metric(gw, "tokenrace_gateway_upstream_attempts_total", backend="a", outcome="breaker_open") == 1
    gateway_clock.advance(0.6)  # past open_s
    assert metric(gw, "tokenrace_gateway_breaker_state", backend="a") == 1  # half-open
    assert post(gw, chat())[0] == 200 and len(a.log()) == before + 1  # one probe, failed
    snap = state(gw)["backends"]["a"]["breaker"]
    assert snap["state"] == "open" and snap["reason"] == "probe failed (5xx)"


def test_half_open_probe_success_closes_the_breaker(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any, gateway_clock: SteppedClock
) -> None:
    a, b = fakes
    gw = gateway(
        {"a": backend(a, breaker={"failures": 1, "open_s": 0.3})},
        [{"model": "m", "backends": ["a"]}],
        retry={**FAST_RETRY, "attempts": 1},
    )
    assert post(gw, chat(fake={"fault": "500"}))[0] == 500
    assert state(gw)["backends"]["a"]["breaker"]["state"] == "open"
    status, _, raw = post(gw, chat())
    assert status == 503 and orjson.loads(raw)["error"]["code"] == "no_backend_available"
    gateway_clock.advance(0.35)  # past open_s
    assert post(gw, chat())[0] == 200
    assert state(gw)["backends"]["a"]["breaker"]["state"] == "closed"
    assert metric(gw, "tokenrace_gateway_breaker_transitions_total", backend="a", to="closed") == 1


# --- streams that fail mid-way ---------------------------------------------------------------------------


def assert_error_end(raw: bytes, code: str, tokens: int) -> dict[str, Any]:
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    last: dict[str, Any] = orjson.loads(events[-2])
    assert last["choices"][0]["finish_reason"] == "error" and last["error"]["code"] == code
    assert last["usage"]["completion_tokens"] == tokens
    assert last["error"]["type"] == "upstream_error" and "failed mid-stream" in last["error"]["message"]
    content = [orjson.loads(e) for e in events[:-2]]
    assert sum(1 for c in content if c["choices"] and c["choices"][0]["delta"].get("content")) == tokens
    assert all(c["id"] == last["id"] for c in content)
    return last


def test_a_backend_dying_mid_stream_ends_with_an_error_event(
    fakes: tuple[FakeServerThread, FakeServerThread], any_gateway: Any
) -> None:
    a, b = fakes
    gw = any_gateway(
        {"a": backend(a), "b": backend(b)}, [{"model": "m", "backends": ["a"], "fallback": ["b"]}], retry=FAST_RETRY
    )
    status, _, raw = post(gw, chat(fake={"fault": "disconnect_midstream", "fault_after_chunks": 3}))
    assert status == 200
    assert_error_end(raw, "disconnect", 3)
    assert len(b.log()) == 0  # bytes had reached the client: no second backend
    status, _, raw = post(gw, chat(fake={"fault": "truncate", "fault_after_chunks": 2}))
    assert_error_end(raw, "truncated", 2)
    assert metric(gw, "tokenrace_gateway_stream_errors_total", backend="a", kind="disconnect") == 1
    assert metric(gw, "tokenrace_gateway_stream_errors_total", backend="a", kind="truncated") == 1
    assert metric(gw, "tokenrace_gateway_requests_total", backend="a", status="stream_error") == 2


def test_a_stalled_stream_hits_the_idle_limit(
    fakes: tuple[FakeServerThread, FakeServerThread], any_gateway: Any
) -> None:
    a, _ = fakes
    gw = any_gateway({"a": backend(a, timeouts={"idle_s": 0.3})}, [{"model": "m", "backends": ["a"]}])
    t = time.monotonic()
    status, _, raw = post(gw, chat(fake={"fault": "stall", "stall_s": 5, "fault_after_chunks": 1}))
    assert status == 200 and time.monotonic() - t < 3
    last = assert_error_end(raw, "timeout_idle", 1)
    assert "idle limit" in last["error"]["message"]


@pytest.mark.slow
def test_no_first_byte_in_time_is_504_or_falls_back_when_timeouts_retry(
    fakes: tuple[FakeServerThread, FakeServerThread], any_gateway: Any
) -> None:
    a, b = fakes
    slow: dict[str, Any] = {"fake": {"ttft_ms": 3000, "role_chunk": False}}
    routes = [{"model": "m", "backends": ["a"], "fallback": ["b"]}]
    gw = any_gateway({"a": backend(a, timeouts={"first_byte_s": 0.3}), "b": backend(b)}, routes, retry=FAST_RETRY)
    status, _, raw = post(gw, chat(stream=False, **slow))
    assert status == 504 and orjson.loads(raw)["error"]["code"] == "upstream_timeout" and len(b.log()) == 0
    gw2 = any_gateway(
        {"a": backend(a, timeouts={"first_byte_s": 0.3}), "b": backend(b, timeouts={"first_byte_s": 10})},
        routes,
        retry={**FAST_RETRY, "on": ["timeout", "5xx"]},
    )
    status, headers, _ = post(gw2, chat(**slow))
    assert status == 200 and headers["x-tokenrace-backend"] == "b"


def test_a_client_that_leaves_mid_stream_releases_the_backend(
    fakes: tuple[FakeServerThread, FakeServerThread], any_gateway: Any
) -> None:
    a, _ = fakes
    gw = any_gateway({"a": backend(a)}, [{"model": "m", "backends": ["a"]}])
    body = orjson.dumps(chat(fake={"itl_ms": 50, "output_tokens": 40}))
    host, port = gw.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-client-key-0123456789\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert b"200 OK" in sock.recv(65536)
        time.sleep(0.2)
    wait_until(lambda: metric(gw, "tokenrace_gateway_client_disconnects_total", backend="a") >= 1, 5, "the disconnect")
    assert metric(gw, "tokenrace_gateway_client_disconnects_total", backend="a") == 1
    assert metric(gw, "tokenrace_gateway_in_flight", backend="a") == 0
    entry = a.log(wait_idle_s=3)[-1]
    assert entry["error"] is not None and "client disconnected" in entry["error"]  # the backend stopped too
    assert state(gw)["backends"]["a"]["breaker"]["consecutive_failures"] == 0  # not the backend's fault


# --- shadow ---------------------------------------------------------------------------------------------


def test_shadow_copies_are_compared_and_never_reach_the_client(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    a, b = fakes
    gw = gateway(
        {"a": backend(a), "b": backend(b)},
        [{"model": "m", "backends": ["a"], "shadow": {"backend": "b", "share": 1.0}}],
    )
    for stream in (True, False, True):
        status, headers, _ = post(gw, chat(stream=stream))
        assert status == 200 and headers["x-tokenrace-backend"] == "a"
    wait_until(lambda: metric(gw, "tokenrace_gateway_shadow_agreement_count", backend="b") >= 3, 5, "3 shadow scores")
    assert len(b.log()) == 3
    assert metric(gw, "tokenrace_gateway_shadow_agreement_sum", backend="b") == 3.0  # the same text: full agreement
    assert metric(gw, "tokenrace_gateway_shadow_ttft_seconds_count", backend="b") == 2
    shadow = state(gw)["routes"]["m"]["shadow"]
    assert shadow["agreement_mean"] == 1.0 and shadow["ok"] == 3 and shadow["ttft_ms"]["p50"] is not None
    assert shadow["exact_match_rate"] == 1.0
    post(gw, chat(max_tokens=4))  # both get max_tokens 4: still equal
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0, "output_tokens": 4, "models": ["m"]}) as short:
        gw2 = gateway(
            {"a": backend(a), "s": backend(short)},
            [{"model": "m", "backends": ["a"], "shadow": {"backend": "s", "share": 1.0}}],
        )
        post(gw2, chat())
        wait_until(lambda: metric(gw2, "tokenrace_gateway_shadow_agreement_count") >= 1, 5, "a shadow score")
        # The token-level similarity of the quality comparison: the short answer is the first 4 of 8 tokens.
        assert abs(metric(gw2, "tokenrace_gateway_shadow_agreement_sum") - 2 * 4 / 12) < 1e-9
        assert state(gw2)["routes"]["m"]["shadow"]["exact_match_rate"] == 0.0


def test_http_1_0_clients_get_a_stream_ended_by_close(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any
) -> None:
    a, _ = fakes
    gw = gateway({"a": backend(a)}, [{"model": "m", "backends": ["a"]}])
    body = orjson.dumps(chat())
    host, port = gw.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer test-client-key-0123456789\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    assert sse_events(payload)[-1] == "[DONE]" and len(sse_events(payload)) == 10


def test_request_log_lines_when_asked(
    fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any, caplog: Any
) -> None:
    a, _ = fakes
    caplog.set_level(logging.INFO, logger="tokenrace.gateway")
    gw = gateway({"a": backend(a)}, [{"model": "m", "backends": ["a"]}], log={"requests": True})
    post(gw, chat(), headers={"x-request-id": "req-42"})
    # The line is written once the answer is out, so it may come just after the client has it.
    lines = wait_until(
        lambda: [json.loads(r.getMessage()) for r in caplog.records if '"event":"request"' in r.getMessage()],
        5,
        "the request's log line",
    )
    assert (
        lines
        and lines[-1]["request_id"] == "req-42"
        and lines[-1]["status"] == 200
        and lines[-1]["client"] == "tester"
        and lines[-1]["backend"] == "a"
    )


def test_healthz(fakes: tuple[FakeServerThread, FakeServerThread], gateway: Any) -> None:
    a, _ = fakes
    gw = gateway({"a": backend(a)}, [{"model": "m", "backends": ["a"]}])
    status, _, raw = http("GET", gw.url + "/healthz", key=None)
    assert status == 200 and json.loads(raw) == {"status": "ok", "backends": 1, "breakers_open": []}
