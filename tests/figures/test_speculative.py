"""Speculative decoding from /metrics: counter deltas, summed over engines, never the `_created` or
per-position series; real recorded pages where they exist, and the fake server end to end."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.fakes.fake_spec import SpecCounters
from tokenrace.figures.speculative import speculative_section
from tokenrace.load.runner import Load
from tokenrace.model.summary import Summary
from tokenrace.runs.session import BenchSession
from tokenrace.runs.settings import BenchSettings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


def js(summary: Summary) -> dict[str, Any]:
    """The summary as summary.json holds it."""
    return summary.model_dump(mode="json")


def prometheus_ui_to_text(path: Path) -> str:
    """A Prometheus query result copied from its web page (`series | value` rows) as exposition text."""
    lines = []
    for row in path.read_text().splitlines():
        series, _, value = row.partition(" | ")
        if value and not series.startswith("--"):
            lines.append(f"{series.replace(', ', ',')} {value}")
    return "\n".join(lines) + "\n"


def vllm_page(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float], engine: str = "0") -> str:
    labels = f'engine="{engine}",model_name="m"'
    rows = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
        f"vllm:spec_decode_num_drafts_created{{{labels}}} 1.7e+09",
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens}",
        f"vllm:spec_decode_num_draft_tokens_created{{{labels}}} 1.7e+09",
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}",
        f"vllm:spec_decode_num_accepted_tokens_created{{{labels}}} 1.7e+09",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    rows += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}",{labels}}} {v}'
        for i, v in enumerate(per_pos)
    ]
    return "\n".join(rows) + "\n"


def test_acceptance_is_accepted_over_draft_tokens_from_deltas() -> None:
    before = vllm_page(10, 30, 20, [8, 7, 5])
    after = vllm_page(110, 330, 200, [88, 67, 45])
    s = speculative_section("vllm", before, after)
    assert s is not None
    assert s.drafts == 100 and s.draft_tokens == 300 and s.accepted_tokens == 180
    assert s.acceptance_rate == 180 / 300
    assert s.mean_accepted_per_draft == 1.8 and s.tokens_per_step == 2.8
    assert s.per_position == [0.8, 0.6, 0.4]
    assert s.over == "window" and "vllm" in s.source


def test_engines_are_summed_whatever_their_label_order() -> None:
    def two(d: float, t: float, a: float) -> str:
        first = vllm_page(d, t, a, [a], engine="0")
        second = vllm_page(d, t, a, [a], engine="1").replace('engine="1",model_name="m"', 'model_name="m",engine="1"')
        return first + "\n".join(x for x in second.splitlines() if not x.startswith("#")) + "\n"

    s = speculative_section("vllm", two(0, 0, 0), two(10, 40, 12))
    assert s is not None
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (20, 80, 24)
    assert s.per_position == [24 / 20]


def test_no_counters_or_no_drafts_is_none_never_zero() -> None:
    assert speculative_section("vllm", "", "vllm:num_requests_running 1\n") is None
    page = vllm_page(5, 15, 9, [5])
    assert speculative_section("vllm", page, page) is None  # present, but nothing drafted in the window
    assert speculative_section("tgi", page, page) is None  # an engine without the counters in the catalog
    assert speculative_section("vllm", "not prometheus {", page) is None


def test_a_counter_going_backwards_gives_no_figure() -> None:
    assert speculative_section("vllm", vllm_page(100, 300, 200, [90]), vllm_page(5, 15, 9, [5])) is None


def test_the_recorded_vllm_dp8_page_sums_eight_engines_and_skips_created() -> None:
    """vLLM's own PR adding spec-decode metrics in DP mode: eight engines, `_created` rows included."""
    text = prometheus_ui_to_text(FIXTURES / "vllm_spec_dp8_pr24049.txt")
    # The page has drafts but lacks the draft-token rows: add them, at zero before and one per draft after.
    drafts = 22 + 15 + 29 + 20 + 25 + 24 + 27 + 26
    before = "vllm:spec_decode_num_draft_tokens_total 0\nvllm:spec_decode_num_accepted_tokens_total 0\n"
    after = f"vllm:spec_decode_num_draft_tokens_total {drafts}\nvllm:spec_decode_num_accepted_tokens_total 7\n"
    s = speculative_section("vllm", before, text + after)
    assert s is not None
    assert s.drafts == drafts == 188  # not 188 + 1.75e9 (the `_created` series)
    assert s.accepted_tokens == 7  # not 7 + the per-position 7
    assert s.per_position == [7 / 188]


def test_llamacpp_counters_are_read_by_their_names() -> None:
    def page(d: int, t: int, a: int) -> str:
        return (
            f"# TYPE llamacpp:spec_decode_num_drafts counter\nllamacpp:spec_decode_num_drafts {d}\n"
            f"# TYPE llamacpp:spec_decode_num_draft_tokens counter\nllamacpp:spec_decode_num_draft_tokens {t}\n"
            f"# TYPE llamacpp:spec_decode_num_accepted_tokens counter\nllamacpp:spec_decode_num_accepted_tokens {a}\n"
        )

    s = speculative_section("llamacpp", page(0, 0, 0), page(4, 32, 20))
    assert s is not None and s.acceptance_rate == 20 / 32 and s.tokens_per_step == 6.0


def test_sglang_gauges_are_read_at_the_end() -> None:
    after = (
        'sglang:spec_accept_rate{model_name="m",dp_rank="0"} 0.6\n'
        'sglang:spec_accept_rate{model_name="m",dp_rank="1"} 0.8\n'
        'sglang:spec_accept_length{model_name="m",dp_rank="0"} 2.5\n'
        'sglang:spec_accept_length{model_name="m",dp_rank="1"} 3.5\n'
    )
    s = speculative_section("sglang", "", after)
    assert s is not None and s.over == "end"
    assert s.acceptance_rate == pytest.approx(0.7) and s.tokens_per_step == 3.0
    assert s.mean_accepted_per_draft == 2.0
    off = 'sglang:spec_accept_rate{model_name="m"} 0\nsglang:spec_accept_length{model_name="m"} 0\n'
    draft_rows = (
        'sglang:spec_accept_rate{engine_type="draft",model_name="d",tp_rank="0"} 0.5\n'
        'sglang:spec_accept_rate{engine_type="unified",model_name="m",tp_rank="0"} 0.6\n'
        'sglang:spec_accept_length{engine_type="draft",model_name="d",tp_rank="0"} 2.7\n'
        'sglang:spec_accept_length{engine_type="unified",model_name="m",tp_rank="0"} 2.8\n'
    )
    target = speculative_section("sglang", "", draft_rows)
    assert target is not None and target.acceptance_rate == 0.6 and target.tokens_per_step == 2.8
    assert speculative_section("sglang", "", off) is None


def test_the_fake_counters_accept_at_the_programmed_rate() -> None:
    counters = SpecCounters()
    rng = random.Random(1)
    for _ in range(400):
        counters.generate(64, 4, 0.7, rng, 0)
    d0, t0, a0 = 1000.0, 3000.0, 2100.0  # what the fake counted before
    drafts, tokens, accepted = counters.totals()
    # Accepted per draft with k=4, p=0.7: p + p^2 + p^3 + p^4.
    assert (accepted - a0) / (drafts - d0) == pytest.approx(0.7 + 0.49 + 0.343 + 0.2401, rel=0.05)
    assert tokens - t0 == 4 * (drafts - d0)


def test_a_run_against_spec_counters_reads_the_servers_own_deltas_exactly(tmp_path: Path) -> None:
    config = {"ttft_ms": 1, "itl_ms": 0.2, "output_tokens": 24, "spec_tokens": 3, "spec_acceptance": 0.6,
              "spec_engines": 2}  # fmt: skip
    with FakeServerThread(config) as srv:
        srv.stats()  # the server counted earlier traffic: only deltas are right
        before = srv.stats()["spec"]
        settings = BenchSettings(
            endpoint=ResolvedEndpoint(srv.base_url, None, None, "fake"),
            request=RequestOptions(max_tokens=24),
            load=Load(requests=12, concurrency=3, cold=False),
            output=tmp_path / "run",
        )
        result = asyncio.run(BenchSession(settings, argv=["tokenrace", "bench"]).run())
        after = srv.stats()["spec"]
    spec = js(result.summary)["speculative"]
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    draft_tokens = after["draft_tokens"] - before["draft_tokens"]
    drafts = after["drafts"] - before["drafts"]
    assert before["draft_tokens"] > 0  # the traps: counters from earlier traffic, `_created`, per-position
    assert spec["acceptance_rate"] == accepted / draft_tokens
    assert spec["drafts"] == drafts and spec["tokens_per_step"] == 1 + accepted / drafts
    assert len(spec["per_position"]) == 3 and spec["per_position"][0] >= spec["per_position"][2]
