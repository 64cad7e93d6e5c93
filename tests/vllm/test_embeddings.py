"""`tokenrace bench --api embeddings` against a real vLLM's pooling runner: a second vLLM CPU server,
for this module alone, serving the session's converted SmolLM2-135M as an embedding model
(`--runner pooling --convert embed`: vLLM wraps the causal LM in its embedding adapter, which takes
the last token's hidden state and normalizes it).

The module's name sorts it before the other vLLM tests, so its server has stopped before the
session's generating one starts: two vLLM servers at once would share a 2-core machine's cores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import in_process
from tests.vllm.shared import VllmHome
from tokenizers import Tokenizer

from tokenrace.serve.launch import RunningEngine
from tokenrace.serve.vllm_cpu import VllmCpuOptions

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # its own vLLM: a minute or two to start

HIDDEN_SIZE = 576  # SmolLM2-135M's: the length of every vector
# Texts of different lengths (words, digits, punctuation, accents), so that a count taken from the
# wrong input, or a text the client changed on the way, cannot give the right sum.
TEXTS = (
    "Hello world",
    "The capital of France is Paris, and its river is the Seine.",
    "Café au lait costs 3.50 euros; 2 of them cost 7.00 euros.",
    "Benchmarks measure what a server does under load: latency, throughput and the tokens it counts.",
)


@pytest.fixture(scope="module")
def pooling(vllm_home: VllmHome) -> Iterator[RunningEngine]:
    # A short context and a 1 GiB KV cache: the inputs are a sentence each.
    opts = VllmCpuOptions(embeddings=True, max_model_len=512, kv_cache_gib=1, max_num_seqs=4)
    engine = vllm_home.start(opts, "vllm-pooling.log")
    try:
        yield engine
    finally:
        engine.stop()


def server_counts(folder: Path) -> list[int]:
    """Each text's tokens as the server counts an input: its tokenizer.json with the special tokens
    its post-processor adds (none for SmolLM2, which has no BOS), so usage is exactly their sum."""
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    counts = [len(tok.encode(t, add_special_tokens=True).ids) for t in TEXTS]
    assert counts == [len(tok.encode(t, add_special_tokens=False).ids) for t in TEXTS]
    return counts


def bench(
    engine: RunningEngine, out: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    prompts = out.with_suffix(".jsonl")
    prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in TEXTS))
    code, _, err = in_process(
        capsys,
        "bench",
        "--url",
        engine.base_url,
        "--api",
        "embeddings",
        "--prompts",
        str(prompts),
        "--no-cold",
        "-o",
        str(out),
        "--json",
        *args,
    )
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    manifest = json.loads((out / "manifest.json").read_text())
    return summary, records, manifest


@pytest.mark.parametrize(("batch", "concurrency"), [(1, 2), (4, 1)])
def test_embeddings_from_the_pooling_runner(
    pooling: RunningEngine,
    vllm_home: VllmHome,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    batch: int,
    concurrency: int,
) -> None:
    requests = 8
    args = ("--batch-size", str(batch), "--concurrency", str(concurrency), "--requests", str(requests))
    summary, records, manifest = bench(pooling, tmp_path / f"b{batch}", capsys, *args)
    assert summary["api"] == "embeddings", summary["api"]
    assert summary["requests"]["succeeded"] == requests and summary["requests"]["failed"] == 0, summary[
        "errors_by_kind"
    ]
    assert len(records) == requests
    assert all(r["error_kind"] is None and r["status"] == 200 for r in records), records
    assert all(r["inputs"] == batch and r["embedding_dim"] == HIDDEN_SIZE for r in records), records
    # Input tokens are the server's usage.prompt_tokens, exactly the tokenizer's count of the inputs
    # the request carried (request i embeds texts i*batch .. i*batch+batch-1, round the list).
    counts = server_counts(vllm_home.folder)
    n = len(TEXTS)
    sums = {sum(counts[(i * batch + j) % n] for j in range(batch)) for i in range(n)}
    assert all(r["prompt_tokens_source"] == "usage" and r["prompt_tokens"] in sums for r in records), (sums, records)
    if batch == n:
        assert {r["prompt_tokens"] for r in records} == {sum(counts)}
    assert all(r["output_tokens"] is None for r in records), records  # vLLM's usage says 0; nothing was generated
    pool = summary["pooling"]
    assert pool["embedding_dim"] == HIDDEN_SIZE and pool["per_request"]["mean"] == batch, pool
    window = summary["throughput"]["window_s"]
    assert window > 0 and pool["inputs_per_s"] == pytest.approx(requests * batch / window, rel=1e-3), pool
    tokens = sum(r["prompt_tokens"] for r in records)
    assert pool["input_tokens_per_s"] == pytest.approx(tokens / window, rel=1e-3), pool
    e2e = summary["metrics"]["e2e_ms"]
    assert e2e["count"] == requests and 0 < e2e["min"] <= e2e["p50"] <= e2e["max"], e2e
    assert summary["metrics"]["ttft_ms"]["count"] == 0 and "one body" in summary["not_measured"]["ttft_ms"]
    server = manifest["server"]  # what doctor's probe saw: the pooling server is vLLM too, by its own answers
    assert server["engine"] == "vllm" and server["engine_version"] == "0.32.0", server


def test_the_engine_record_says_pooling(pooling: RunningEngine) -> None:
    info = pooling.info
    argv = info.launch_command or []
    assert info.engine == "vLLM (CPU build)" and info.embeddings is True, info
    assert argv[argv.index("--runner") + 1] == "pooling" and argv[argv.index("--convert") + 1] == "embed", argv
    assert "--enforce-eager" in argv and argv[argv.index("--max-model-len") + 1] == "512", argv
    assert info.readiness is not None and info.readiness.ready_s, info.readiness  # a real embedding answered
