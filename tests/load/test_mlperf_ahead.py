"""LoadGen's samples are built before it issues them: each built request is its own (a cache-busting
tag no other request has), encoded as the client would encode it at the send."""

from __future__ import annotations

from pathlib import Path

from tokenrace.client.openai import OpenAIClient
from tokenrace.client.request import Prompt, RequestOptions
from tokenrace.load import mlperf
from tokenrace.load.mlperf import LoadgenRunner, MlperfSpec
from tokenrace.load.prompts import builtin
from tokenrace.load.workload import Prompts
from tokenrace.load.workloads.prefixes import new_nonce
from tokenrace.model.records import RequestRecord


async def _send(prompt: object, rec: RequestRecord) -> RequestRecord:
    return rec


async def _finish(rec: RequestRecord, prompt: Prompt) -> None:
    return None


def _runner(tmp_path: Path, client: OpenAIClient, samples: int) -> LoadgenRunner:
    workload = Prompts(builtin(), nonce=new_nonce())
    spec = MlperfSpec("server", ttft_ms=2000, tpot_ms=200, target_qps=1)
    return LoadgenRunner(_send, client.encode, workload, spec, _finish, tmp_path, samples)


def test_every_request_built_for_a_sample_is_its_own(tmp_path: Path) -> None:
    client = OpenAIClient("http://127.0.0.1:9/v1", "m", options=RequestOptions(max_tokens=24))
    runner = _runner(tmp_path, client, 4)
    runner._build_ahead()
    assert sorted(runner._ready) == [0, 1, 2, 3]
    again = [runner._build(0), runner._build(0)]  # sample 0 issued again while its first is in flight
    built = [*runner._ready.values(), *again]
    assert len({r.encoded.payload for r in built}) == len(built)  # no two share a tag
    first = runner._ready[0]
    # Encoded as the client encodes at the send, and the sample's own text.
    assert first.encoded == client.encode(first.encoded.prompt)
    text = builtin().prompts[0].as_text()
    assert all(text in r.encoded.prompt.as_text() for r in (first, *again))


def test_samples_past_the_memory_budget_are_built_at_issue(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client = OpenAIClient("http://127.0.0.1:9/v1", "m")
    one = len(client.encode(builtin().prompts[0]).payload)
    monkeypatch.setattr(mlperf, "AHEAD_BYTES", 2 * one + one // 2)
    runner = _runner(tmp_path, client, 3)
    runner._build_ahead()
    assert list(range(runner._ahead)) == sorted(runner._ready) and 1 <= len(runner._ready) < 3
