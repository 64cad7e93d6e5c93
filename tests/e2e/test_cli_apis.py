"""`tokenrace bench --api ...` end to end against the fake server: every API's run, its records
and summary figures, the flags an API refuses, and a server that lacks the API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from tests.conftest import fake_key, in_process, tokenrace

from tokenrace.cli import bench as bench_cli
from tokenrace.errors import EngineError
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.serve.vllm_cpu import VllmCpuOptions

KEY = fake_key("sk-ant-", "apis")
TTFT_MS, PER_INPUT_MS, PER_DOCUMENT_MS = 20.0, 2.0, 1.5
UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    config = {
        "ttft_ms": TTFT_MS,
        "itl_ms": 2,
        "output_tokens": 8,
        "embedding_ms_per_input": PER_INPUT_MS,
        "rerank_ms_per_document": PER_DOCUMENT_MS,
        "embedding_dim": 16,
        "api_key": KEY,
    }
    with spawn_fake_server(config) as srv:
        yield srv


def _bench(server: Any, out: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    p = tokenrace("bench", "--url", server.url, "--requests", "6", "--concurrency", "2", "-o", str(out), *args, env=env)
    assert p.returncode == 0, p.stderr
    assert KEY not in p.stdout + p.stderr
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["succeeded"] == 6, summary["errors_by_kind"]
    return summary


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_streamed_apis(server: Any, tmp_path: Path, api: str) -> None:
    server.reset()
    summary = _bench(server, tmp_path / "r", "--api", api, "--api-key", KEY)
    assert summary["api"] == api and summary["not_measured"] is None
    assert summary["metrics"]["ttft_ms"]["p50"] >= TTFT_MS and summary["metrics"]["tpot_ms"]["count"] == 6
    assert summary["token_count_source"]["output_tokens"] == "usage"
    assert summary["throughput"]["output_tokens_per_s"] > 0 and summary["pooling"] is None
    sent = server.log()
    assert {e["path"] for e in sent} == {f"/v1/{api}"}
    auth = {"messages": ["anthropic-version", "x-api-key"], "responses": ["authorization"]}[api]
    assert all(e["auth_headers"] == auth for e in sent)  # never Authorization for messages


@pytest.mark.slow
def test_embeddings(server: Any, tmp_path: Path) -> None:
    out = tmp_path / "r"
    summary = _bench(
        server, out, "--api", "embeddings", "--batch-size", "4", "--input-tokens", "16", "--api-key", KEY, "--no-cold"
    )
    m = summary["metrics"]
    assert m["ttft_ms"]["count"] == 0 and m["ttft_ms"]["p50"] is None and m["tpot_ms"]["p50"] is None
    assert "one body" in summary["not_measured"]["ttft_ms"] and "one body" in summary["not_measured"]["tpot_ms"]
    assert m["e2e_ms"]["p50"] >= TTFT_MS + 4 * PER_INPUT_MS
    assert summary["throughput"]["output_tokens_per_s"] is None  # nothing generated: unknown, not 0
    pooling = summary["pooling"]
    assert pooling["api"] == "embeddings" and pooling["embedding_dim"] == 16
    rps = summary["throughput"]["requests_per_s"]
    assert pooling["inputs_per_s"] == pytest.approx(4 * rps, rel=1e-3)
    assert pooling["input_tokens_per_s"] > pooling["inputs_per_s"]
    records = _records(out)
    assert all(r["inputs"] == 4 and r["embedding_dim"] == 16 and r["ttft_ms"] is None for r in records)
    assert all(r["prompt_tokens_source"] == "usage" and r["max_tokens"] is None for r in records)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["request"]["api"] == "embeddings" and manifest["workload"]["cache_bust"] is False


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["cohere", "tei"])
def test_rerank(server: Any, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "r"
    args = ("--api", "rerank", "--rerank-format", fmt, "--documents", "5", "--input-tokens", "12", "--api-key", KEY)
    summary = _bench(server, out, *args)
    pooling = summary["pooling"]
    assert pooling["documents_per_s"] == pytest.approx(5 * summary["throughput"]["requests_per_s"], rel=1e-3)
    assert summary["metrics"]["e2e_ms"]["p50"] >= TTFT_MS + 5 * PER_DOCUMENT_MS
    assert all(r["documents"] == 5 for r in _records(out))


@pytest.mark.slow
def test_the_table_names_the_figures(server: Any, tmp_path: Path) -> None:
    p = tokenrace(
        "bench",
        "--url",
        server.url,
        "--api",
        "embeddings",
        "--api-key",
        KEY,
        "--requests",
        "3",
        "-o",
        str(tmp_path / "r"),
    )
    assert p.returncode == 0, p.stderr
    assert "inputs/s" in p.stdout and "no TTFT, TPOT or ITL" in p.stdout and "16 dimensions" in p.stdout


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--api", "embeddings", "--batch-size", "0"], "--batch-size"),
        (["--batch-size", "4"], "--batch-size"),
        (["--api", "rerank", "--documents", "0"], "--documents"),
        (["--api", "embeddings", "--documents", "3"], "--documents"),
        (["--rerank-format", "tei"], "--rerank-format"),
        (["--api", "embeddings", "--output-tokens", "64"], "--output-tokens"),
        (["--api", "embeddings", "--slo", "ttft=200ms"], "--slo"),
        (["--api", "rerank", "--turns", "3"], "--turns"),
        (["--api", "embeddings", "--cancel-rate", "0.5"], "--cancel-rate"),
        (["--api", "embeddings", "--quality-samples", "2"], "--quality-samples"),
    ],
)
def test_flags_an_api_does_not_take(args: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = in_process(capsys, "bench", "--url", UNREACHABLE, "--requests", "2", *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {flag}"), err
    assert "cannot reach" not in err


def test_rerank_needs_a_url(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "")
    code, _, err = in_process(capsys, "bench", "--api", "rerank", "--requests", "2")
    assert code == 2 and err.startswith("error: --api"), err


def test_engine_vllm_serves_embeddings_from_its_pooling_runner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What bench asks of the engine it starts; tests/vllm/test_embeddings.py runs the real one."""
    asked: list[object] = []

    async def profile(settings: object, engine: object, *rest: object) -> NoReturn:
        asked.append(engine)
        raise EngineError("not started here")

    monkeypatch.setenv("OPENAI_BASE_URL", "")
    monkeypatch.setattr(bench_cli, "run_profile", profile)
    code, _, err = in_process(capsys, "bench", "--engine", "vllm", "--api", "embeddings", "-o", str(tmp_path / "r"))
    assert (
        "not started here" in err and "vLLM's CPU build, float32, SmolLM2-135M-Instruct Q4_1 serving embeddings" in err
    )
    assert len(asked) == 1 and isinstance(asked[0], VllmCpuOptions) and asked[0].embeddings, asked


@pytest.mark.slow
def test_a_server_without_the_api_gives_records_and_a_hint(tmp_path: Path) -> None:
    out = tmp_path / "r"
    with spawn_fake_server({"ttft_ms": 1, "apis": ["chat"]}) as srv:
        p = tokenrace("bench", "--url", srv.url, "--api", "embeddings", "--requests", "3", "--no-cold", "-o", str(out))
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert "HTTP 404" in line and "may not serve the embeddings API" in line
    records = _records(out)
    assert records and all(r["status"] == 404 and r["error_kind"] == "http_404" for r in records)
    assert "404: Not Found" in records[0]["error_message"] and "may not serve" in records[0]["error_message"]
    assert json.loads((out / "summary.json").read_text())["errors_by_kind"] == {"http_404": len(records)}
