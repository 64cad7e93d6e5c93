"""--content: prompts of three kinds at one length, records that carry their kind, and the verdict
against a fake server of constant speed and one whose speed depends on what it writes."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tokenrace.cli import main
from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.errors import InvalidInput
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.figures.content import ContentSample, content_section
from tokenrace.load.content import KINDS, Content, content_prompts, parse_content
from tokenrace.load.runner import Load
from tokenrace.model.summary import Summary
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession, read_inputs
from tokenrace.runs.settings import BenchSettings, PromptSpec
from tokenrace.sweep.runner import SweepPlan, run_sweep

CONSTANT = {"ttft_ms": 2, "itl_ms": 2, "output_tokens": 24, "jitter_ms": 0.3}
# copy is fast and accepts most drafts, random is slow: what speculative decoding does.
DEPENDENT = {
    **CONSTANT,
    "spec_tokens": 3,
    "when_prompt_contains": {
        "verbatim": {"itl_ms": 1, "spec_acceptance": 0.95},
        "digits": {"itl_ms": 4, "spec_acceptance": 0.1},
    },
}


def js(summary: Summary) -> dict[str, Any]:
    """The summary as summary.json holds it."""
    return summary.model_dump(mode="json")


def settings(srv: FakeServerThread, out: Path, content: str, requests: int = 36, **kw: Any) -> BenchSettings:
    return BenchSettings(
        endpoint=ResolvedEndpoint(srv.base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=24),
        load=Load(requests=requests, concurrency=3, cold=False),
        prompts=PromptSpec(input_tokens=(200, 0.0), output_tokens=(24, 0.0), content=content),
        output=out,
        **kw,
    )


def bench(srv: FakeServerThread, out: Path, content: str, requests: int = 36) -> Run:
    return asyncio.run(BenchSession(settings(srv, out, content, requests), argv=["tokenrace", "bench"]).run())


def test_the_kinds_share_one_prompt_length_and_never_repeat_a_random_string() -> None:
    ps = content_prompts(KINDS, 300, 64, 20, seed=1)
    assert [p.content for p in ps.prompts[:6]] == ["natural", "copy", "random"] * 2
    assert all(p.max_tokens == 64 for p in ps.prompts)
    lengths = {k: [len((p.text or "").split()) for p in ps.prompts if p.content == k] for k in KINDS}
    means = {k: sum(v) / len(v) for k, v in lengths.items()}
    assert max(means.values()) <= 1.15 * min(means.values())
    strings = [(p.text or "").rsplit("\n\n", 1)[1] for p in ps.prompts if p.content == "random"]
    assert len(set(strings)) == 20 and all(re.fullmatch(r"[0-9 ]+", s) for s in strings)
    copies = [p.text or "" for p in ps.prompts if p.content == "copy"]
    assert all("verbatim" in t for t in copies)


def test_bad_content_inputs_name_their_input() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_content("poetry")
    assert err.value.param == "content"
    with pytest.raises(InvalidInput) as err:
        content_prompts((Content.COPY,), 64, 256, 4)
    assert err.value.param == "input_tokens"


def test_content_with_embeddings_is_bad_input_before_the_network() -> None:
    s = BenchSettings(
        endpoint=ResolvedEndpoint("http://127.0.0.1:9/v1", None, None, "fake"),
        request=RequestOptions(api="embeddings"),
        load=Load(requests=4),
        prompts=PromptSpec(content="copy"),
    )
    with pytest.raises(InvalidInput) as err:
        read_inputs(s)
    assert err.value.param == "content" and "embeddings" in err.value.problem


@pytest.mark.parametrize("api", ["embeddings", "rerank"])
def test_content_with_a_pooling_api_exits_2_naming_the_flag(api: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--url", "http://127.0.0.1:9/v1", "--api", api, "--content", "copy"])
    assert exited.value.code == 2
    assert f"error: --content: asks the model to write text; the {api} API generates none" in capsys.readouterr().err


def test_the_cli_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--url", "http://127.0.0.1:9/v1", "--content", "copy", "--prompt", "hi"])
    assert exited.value.code == 2
    assert "error: --content: writes its own prompts" in capsys.readouterr().err


def test_a_server_of_constant_speed_shows_no_dependence(tmp_path: Path) -> None:
    with FakeServerThread(CONSTANT) as srv:
        r = bench(srv, tmp_path / "run", "all")
    c = js(r.summary)["content"]
    assert set(c["kinds"]) == {"natural", "copy", "random"}
    assert all(k["requests"] == 12 for k in c["kinds"].values())
    assert c["depends"] is False and c["verdict"].startswith("no dependence found")
    lines = [json.loads(x) for x in (r.directory / "records.jsonl").read_text().splitlines()]
    assert {x["content"] for x in lines} == {"natural", "copy", "random"}


@pytest.mark.slow
def test_a_server_whose_speed_depends_on_content_is_caught(tmp_path: Path) -> None:
    with FakeServerThread(DEPENDENT) as srv:
        r = bench(srv, tmp_path / "run", "all")
    c = js(r.summary)["content"]
    assert (c["fastest"], c["slowest"], c["depends"]) == ("copy", "random", True)
    assert 2.5 < c["ratio"] < 6 and c["ci_low"] > 1.05
    assert c["verdict"].startswith("decode speed depends on content (×") and "between copy and random" in c["verdict"]
    # Interleaved kinds share the engine's counters: no acceptance can be put on one kind.
    assert all(k["acceptance_rate"] is None for k in c["kinds"].values())
    assert js(r.summary)["speculative"]["acceptance_rate"] is not None


@pytest.mark.slow
def test_a_content_sweep_runs_each_kind_alone_with_its_acceptance(tmp_path: Path) -> None:
    with FakeServerThread(DEPENDENT) as srv:
        template = settings(srv, tmp_path / "sweep", "all", requests=12)
        result = asyncio.run(run_sweep(template, SweepPlan(kind="content", values=())))
    assert [name for name, _ in result.steps] == ["natural", "copy", "random"]
    swept = result.sweep.model_dump(mode="json")
    c = swept["content"]
    kinds = c["kinds"]
    assert kinds["copy"]["acceptance_rate"] > 0.8 > 0.3 > kinds["random"]["acceptance_rate"]
    assert c["depends"] is True and c["slowest"] == "random"
    rows = swept["steps"]
    assert [row["content"] for row in rows] == ["natural", "copy", "random"]
    assert rows[1]["acceptance_rate"] == kinds["copy"]["acceptance_rate"]


def test_fewer_than_two_kinds_or_requests_give_no_interval() -> None:
    one = content_section([ContentSample("copy", 5.0, 10, 100)] * 3)
    assert one is not None and one.kinds["copy"].requests == 3 and "nothing to compare" in (one.verdict or "")
    few = content_section([ContentSample("copy", 5.0, 10, 100), ContentSample("random", 9.0, 10, 100)])
    assert few is not None and few.depends is None and (few.verdict or "").startswith("too few requests")
    assert content_section([]) is None


def test_the_flags_reach_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`bench --content all --dcgm-url ... --json` from the command line to summary.json."""
    with FakeServerThread({**DEPENDENT, "dcgm_power_w": [300.0]}) as srv:
        main(
            [
                "bench",
                "--url",
                srv.base_url,
                "--content",
                "all",
                "--input-tokens",
                "120",
                "--output-tokens",
                "24",
                "--requests",
                "12",
                "--concurrency",
                "3",
                "--no-cold",
                "--dcgm-url",
                f"{srv.url}/dcgm/metrics",
                "-o",
                str(tmp_path / "run"),
                "--json",
            ]  # fmt: skip
        )
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["content"]["kinds"]) == {"natural", "copy", "random"}
    assert printed["energy"]["joules"] > 0 and printed["speculative"]["acceptance_rate"] is not None
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["settings"]["prompts"]["content"] == "all" and manifest["settings"]["dcgm_url"].endswith(
        "/dcgm/metrics"
    )
