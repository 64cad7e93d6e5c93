"""tokenrace against a real vLLM (the CPU build serving the embedded SmolLM2-135M, float32).

Everything read here is vLLM's own: its /metrics names and counters, its usage fields, its four
generating routes, its /version. The fakes elsewhere in the suite agree with what we believe vLLM
does; these tests are where that belief is checked.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.conftest import in_process

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.doctor.environment import probe_server_environment
from tokenrace.engines import ENGINES
from tokenrace.load.runner import Load
from tokenrace.load.workload import WorkloadSpec
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession
from tokenrace.runs.settings import BenchSettings, PromptSpec
from tokenrace.serve.launch import RunningEngine

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # one vLLM for the session: a minute or two to start

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
CAPTURE = FIXTURES / "vllm_cpu_0.32.0_spec_ngram.txt"


def bench(
    engine: RunningEngine, out: Path, *, api: str = "chat", max_tokens: int = 16, extra: Any = None, **kw: Any
) -> Run:
    load = {"cold": False, "concurrency": 1, "requests": 4, **kw.pop("load", {})}
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(engine.base_url, None, None, "vllm"),
        request=RequestOptions(api=api, max_tokens=max_tokens, temperature=0.0, extra_body=extra or {}),
        load=Load(**load),
        output=out,
        engine=engine.info,
        **kw,
    )
    return asyncio.run(BenchSession(settings, argv=["test"]).run())


def metrics_text(engine: RunningEngine) -> str:
    with urllib.request.urlopen(f"{engine.root}/metrics", timeout=30) as r:
        return str(r.read().decode())


def families(text: str) -> set[str]:
    """The metric families a /metrics page declares (its `# TYPE` lines)."""
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


def vllm_families(text: str) -> set[str]:
    """The engine's own families (`vllm:`), declared at start whatever was asked of it; the HTTP
    ones appear with the first request to each route."""
    return {f for f in families(text) if f.startswith("vllm:")}


def test_the_catalog_names_what_vllm_really_serves(vllm: RunningEngine) -> None:
    text = metrics_text(vllm)
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    m = ENGINES["vllm"].metrics
    assert m is not None and m.speculative is not None
    for field, names in m.gauges.items():
        assert any(n in samples for n in names), (field, names)
    for field, name in m.counters.items():
        assert name in samples, (field, name)
    for newest, *_ in m.histograms.values():  # the newest name is the one this version serves
        assert f"{newest}_bucket" in samples, newest
    assert any(f"{q}_total" in samples and f"{h}_total" in samples for q, h in m.cache_counters), m.cache_counters
    spec = m.speculative
    for counter in (spec.drafts, spec.draft_tokens, spec.accepted_tokens, spec.accepted_per_position):
        assert counter in samples, counter


def test_the_recorded_fixture_is_this_vllms_page(vllm: RunningEngine) -> None:
    """The capture in tests/fixtures/metrics declares the families the running version declares:
    a new vLLM that renames one fails here until the capture is taken again (see its README)."""
    assert vllm_families(CAPTURE.read_text()) == vllm_families(metrics_text(vllm))


def test_a_shared_prefix_hits_the_cache_by_the_counters_and_by_usage(vllm: RunningEngine, tmp_path: Path) -> None:
    # One 512-token prefix for every request: all but the first find it cached.
    shared = bench(vllm, tmp_path / "shared", workload=WorkloadSpec(shared_prefix_tokens=512), load={"requests": 6})
    cache = shared.summary.cache
    assert cache.requests_reporting == 6, cache  # every answer's usage says how many prompt tokens were cached
    server = cache.server
    assert server is not None and server.source.startswith("vllm"), cache
    # The engine's counters and the answers' usage count the same tokens: they agree exactly.
    assert (server.hits, server.queries) == (cache.cached_tokens, cache.prompt_tokens), cache
    # Five of six requests find the 512 shared tokens (of about 600): well over half, under 5/6.
    assert 0.55 < cache.hit_rate < 5 / 6, cache
    # Busted prompts (a unique prefix first) find nothing but the chat template's opening block.
    busted = bench(vllm, tmp_path / "busted", load={"requests": 4}).summary.cache
    assert busted.busted is True and busted.hit_rate < 0.2, busted


def test_speculative_acceptance_is_read_from_the_counters(vllm: RunningEngine, tmp_path: Path) -> None:
    runs = {c: bench(vllm, tmp_path / c, max_tokens=64, prompts=PromptSpec(content=c)) for c in ("copy", "natural")}
    spec = {c: r.summary.speculative for c, r in runs.items()}
    for c, s in spec.items():
        assert s is not None and s.source.startswith("vllm"), (c, s)
        assert s.draft_tokens and s.drafts and s.accepted_tokens is not None, (c, s)
        assert s.acceptance_rate == pytest.approx(s.accepted_tokens / s.draft_tokens), (c, s)
        assert s.per_position is not None and len(s.per_position) == 3, (c, s)
    # Asked to copy text from its prompt, the model writes what ngram drafting finds in the prompt.
    # (Measured: 96 % of copy drafts accepted, 30 % of natural ones.)
    assert (
        spec["copy"].acceptance_rate > 0.6 and spec["copy"].acceptance_rate > spec["natural"].acceptance_rate + 0.2
    ), spec


@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_every_generating_route(vllm: RunningEngine, tmp_path: Path, api: str) -> None:
    # A bare completion prompt (no chat template) sometimes gets the end-of-text token first, an
    # empty answer: ignore_eos (a vLLM extra) keeps the route's test about the route.
    extra = {"ignore_eos": True} if api == "completions" else None
    run = bench(vllm, tmp_path / api, api=api, max_tokens=8, extra=extra, load={"requests": 2})
    s = run.summary
    assert s.requests.succeeded == 2 and s.requests.failed == 0, (s.requests, s.errors_by_kind)
    assert s.api == api and s.metrics.output_tokens.mean and s.metrics.output_tokens.mean > 0, s.metrics
    assert run.manifest.engine is not None and run.manifest.engine.engine == "vLLM (CPU build)"
    server = run.manifest.server  # what doctor's probe saw: the engine from its own answers
    assert server is not None and server.engine == "vllm" and server.engine_version == "0.32.0", server


def test_the_engine_clock_beside_the_clients(vllm: RunningEngine, tmp_path: Path) -> None:
    clock = bench(vllm, tmp_path / "clock", max_tokens=32).summary.server_vs_client
    assert clock is not None and clock.source.startswith("vllm"), clock
    ttft, tpot = clock.ttft_ms, clock.tpot_ms
    # The client's TTFT holds the engine's and the HTTP around it: larger, and not by seconds.
    assert ttft.client_mean and ttft.server_mean and 0 < ttft.server_mean <= ttft.client_mean * 1.05, ttft
    assert tpot.client_mean and tpot.server_mean and tpot.ratio_mean and 0.5 < tpot.ratio_mean < 2, tpot


def test_doctor_names_the_engine_its_version_and_context(vllm: RunningEngine) -> None:
    async def probe() -> Any:
        async with aiohttp.ClientSession() as s:
            return await probe_server_environment(s, vllm.base_url)

    found = asyncio.run(probe())
    assert found.engine == "vllm" and found.engine_version == vllm.info.version == "0.32.0", found
    assert found.max_model_len == 2048 and [m.id for m in found.models] == [vllm.model], found


def test_monitor_reads_the_running_vllm(
    vllm: RunningEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = in_process(
        capsys,
        "monitor",
        "--metrics-url",
        vllm.root,
        "--duration",
        "3s",
        "--interval",
        "0.5",
        "-o",
        str(tmp_path),
        "--json",
    )
    assert code == 0, err
    assert '"engine": "vllm"' in out, out
    assert (tmp_path / "timeseries.jsonl").stat().st_size > 0


def test_manifest_records_how_vllm_was_started(vllm: RunningEngine) -> None:
    info = vllm.info
    argv = info.launch_command or []
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"], argv
    assert {"--enforce-eager", "--enable-prompt-tokens-details"} <= set(argv)
    assert argv[argv.index("--dtype") + 1] == "float32" and argv[argv.index("--max-model-len") + 1] == "2048"
    assert info.model_file is not None and info.model_file.quantization == "MOSTLY_Q4_1", info.model_file
    assert info.readiness is not None and info.readiness.ready_s, info.readiness


def test_a_claim_against_the_real_vllm(
    vllm: RunningEngine, tmp_path: Path, tokenrace_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A short demonstration: the claim battery against vLLM within a minute gives one of its four
    verdicts, with the figures and the steps that decided it (or what would decide it)."""
    out = tmp_path / "claim"
    code, stdout, err = in_process(
        capsys, "claim", "--url", vllm.base_url, "--expect", "ttft_p50<=5s,output_tok_s_per_user>=1",
        "--budget", "60s", "--max-tokens", "16", "--max-concurrency", "4", "--max-prompt-tokens", "1024",
        "-o", str(out), "--yes",
    )  # fmt: skip
    assert code in (0, 1), err
    claim = json.loads((out / "claim.json").read_text())
    assert claim["verdict"] in ("holds", "holds_only_under", "fails", "unproven") and claim["sentence"], claim
    assert claim["elapsed_s"] < 120 and (out / "report.html").exists()
    decided = [c for c in claim["conditions"] if c["held"] is not None]
    assert decided, "a minute on the real engine decides at least one condition"
    manifests = [json.loads(p.read_text()) for p in out.rglob("manifest.json")]
    assert manifests and {(m.get("server") or {}).get("engine") for m in manifests} == {"vllm"}
