"""`tokenrace bench --api embeddings` with no URL: the embedded llama-server started with --embeddings
returns the model's real vectors, and the run reports their dimension and real latencies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFReader
from tests.integration.conftest import require_embedded

from tokenrace.serve.embedded import default_model

pytestmark = pytest.mark.embedded


def _hidden_size(model: Path) -> int:
    """The model's own embedding length, from its GGUF metadata."""
    reader = GGUFReader(str(model))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    field = reader.fields[f"{arch}.embedding_length"]
    return int(field.parts[field.data[0]][0])


def test_embeddings_from_the_embedded_engine(tmp_path: Path) -> None:
    require_embedded()
    out = tmp_path / "e"
    args = ["--api", "embeddings", "--batch-size", "2", "--input-tokens", "24", "--requests", "4", "--no-cold"]
    p = subprocess.run(
        [sys.executable, "-m", "tokenrace", "bench", *args, "-o", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr
    assert "serving embeddings" in p.stderr
    summary = json.loads((out / "run" / "summary.json").read_text())
    assert summary["api"] == "embeddings" and summary["requests"]["succeeded"] == 4
    pooling = summary["pooling"]
    assert pooling["embedding_dim"] == _hidden_size(default_model()) == 576  # SmolLM2-135M's hidden size
    assert pooling["inputs_per_s"] > 0 and pooling["input_tokens_per_s"] > 0
    e2e = summary["metrics"]["e2e_ms"]
    assert e2e["count"] == 4 and 0 < e2e["min"] <= e2e["p50"] <= e2e["max"]
    assert summary["metrics"]["ttft_ms"]["count"] == 0 and "one body" in summary["not_measured"]["ttft_ms"]
    records = [json.loads(line) for line in (out / "run" / "records.jsonl").read_text().splitlines()]
    assert all(r["embedding_dim"] == 576 and r["inputs"] == 2 for r in records)
    assert all(r["prompt_tokens_source"] == "usage" and r["prompt_tokens"] >= 2 for r in records)
    manifest = json.loads((out / "run" / "manifest.json").read_text())
    assert manifest["engine"]["embeddings"] is True
    assert "--embeddings" in manifest["engine"]["launch_command"]
