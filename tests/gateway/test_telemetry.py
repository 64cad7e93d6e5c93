"""OpenTelemetry spans: one per request with route, backend, attempts, TTFT and status; none, and no
import, when off."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require_module

from tokenrace.errors import UsageError
from tokenrace.fakes.fake_server import FakeServerThread

from .helpers import ENV, ROOT, GatewayThread, chat, config_text
from .test_proxy import FAST_RETRY, post

require_module("opentelemetry.sdk", "pip install 'tokenrace[otel]'")

# After the check that the otel extra is there:
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from tokenrace.gateway.telemetry import Tracing, exporters_from_env  # noqa: E402


def traced(gw: GatewayThread) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gw.gw.tracing = Tracing(provider)
    return exporter


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_one_span_per_request_with_route_backend_attempts_ttft_and_status(
    fakes: tuple[FakeServerThread, FakeServerThread],
    gateway: Callable[..., GatewayThread],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    a, _ = fakes
    with socket.socket() as s:  # bound, not listening: connects are refused
        s.bind(("127.0.0.1", 0))
        gw = gateway(
            {"dead": {"url": f"http://127.0.0.1:{s.getsockname()[1]}/v1"}, "a": {"url": a.base_url}},
            [{"model": "m", "backends": ["dead"], "fallback": ["a"]}],
            retry=FAST_RETRY,
            telemetry={"otel": True},
        )
        spans = traced(gw)
        assert post(gw, chat(stream=True))[0] == 200
        assert post(gw, chat(stream=False))[0] == 200
        assert post(gw, chat(model="nope"))[0] == 404
    streamed, whole, refused = spans.get_finished_spans()
    got = attrs(streamed)
    assert streamed.name == "POST /v1/chat/completions"
    assert (got["tokenrace.route"], got["tokenrace.backend"], got["http.response.status_code"]) == ("m", "a", 200)
    assert got["tokenrace.attempts"] == 3  # the dead backend twice (its retry), then the fallback
    assert got["tokenrace.stream"] is True and 0 < got["tokenrace.ttft_ms"] < 30_000
    assert streamed.start_time is not None and streamed.end_time is not None
    assert streamed.end_time >= streamed.start_time
    w = attrs(whole)
    assert w["tokenrace.backend"] == "a" and "tokenrace.ttft_ms" not in w  # undefined is absent, not 0
    r = attrs(refused)
    assert r["http.response.status_code"] == 404 and r["tokenrace.attempts"] == 0 and "tokenrace.route" not in r


def test_a_failed_request_is_an_error_span(
    gateway: Callable[..., GatewayThread], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        gw = gateway(
            {"dead": {"url": f"http://127.0.0.1:{s.getsockname()[1]}/v1"}},
            [{"model": "m", "backends": ["dead"]}],
            retry=FAST_RETRY,
            telemetry={"otel": True},
        )
        spans = traced(gw)
        status = post(gw, chat())[0]
    (span,) = spans.get_finished_spans()
    assert status >= 500 and attrs(span)["http.response.status_code"] == status
    assert span.status.status_code == StatusCode.ERROR


def test_exporters_come_from_the_standard_environment() -> None:
    assert exporters_from_env({"OTEL_TRACES_EXPORTER": "none"}) == []
    (console,) = exporters_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert type(console).__name__ == "ConsoleSpanExporter"
    with pytest.raises(UsageError, match="OTEL_TRACES_EXPORTER names 'zipkin_nope'"):
        exporters_from_env({"OTEL_TRACES_EXPORTER": "zipkin_nope"})


@pytest.mark.slow
def test_off_by_default_and_then_never_imported() -> None:
    """A gateway without `telemetry: {otel: true}` never imports OpenTelemetry."""
    code = """
import sys, yaml
from tokenrace.gateway.app import Gateway
from tokenrace.gateway.config import parse_config, resolve_secrets
doc = {"backends": {"a": {"url": "http://127.0.0.1:9/v1"}}, "routes": [{"model": "m", "backends": ["a"]}],
       "auth": {"required": False}}
config = parse_config(yaml.safe_dump(doc), "t.yaml", {})
gw = Gateway(config, resolve_secrets(config, {}))
print(json.dumps([gw.tracing is None, any(m.startswith("opentelemetry") for m in sys.modules)]))
"""
    out = subprocess.run(
        [sys.executable, "-c", "import json\n" + code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [True, False]


@pytest.mark.slow
def test_an_exporter_no_package_provides_stops_the_start_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(config_text({"a": {"url": "http://127.0.0.1:9/v1"}}, [{"model": "m", "backends": ["a"]}],
                                telemetry={"otel": True}))  # fmt: skip
    env = {**os.environ, **ENV, "OTEL_TRACES_EXPORTER": "nope", "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "tokenrace", "gateway", "--config", str(path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "OTEL_TRACES_EXPORTER names 'nope'" in out.stderr, out.stderr
