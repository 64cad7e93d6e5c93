"""Workloads through the whole bench path (settings -> runner -> client -> fake server with a
simulated prefix cache -> summary): sessions, busting, shared prefixes, traces, shapes, cancels."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.conftest import in_process

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.load.runner import Load
from tokenrace.load.shapes import parse_stages
from tokenrace.load.workload import MAX_SKIPPED_NOTES, WorkloadSpec, skipped_notes
from tokenrace.load.workloads.sessions import parse_turns
from tokenrace.report.compare import compare
from tokenrace.report.html import build, write
from tokenrace.report.tables import headline_lines
from tokenrace.runs.reader import load
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession
from tokenrace.runs.settings import BenchSettings
from tokenrace.sweep.runner import SweepPlan, run_sweep

ROOT = Path(__file__).resolve().parents[2]
CACHE = {"ttft_ms": 1, "itl_ms": 0.3, "output_tokens": 6, "prefix_cache": True, "cache_block_size": 4}


@pytest.fixture
def cached() -> Iterator[FakeServerThread]:
    with FakeServerThread(CACHE) as srv:
        yield srv


def run(srv: FakeServerThread, out: Path, workload: WorkloadSpec, **load: Any) -> Run:
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(srv.base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=8),
        load=Load(**{"requests": 12, "cold": False, **load}),
        workload=workload,
        output=out,
    )
    return asyncio.run(BenchSession(settings, argv=["tokenrace", "bench"]).run())


def records(result: Run) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (result.directory / "records.jsonl").read_text().splitlines()]


def test_builtin_prompts_are_busted_by_default_and_repeat_hits_without(
    cached: FakeServerThread, tmp_path: Path
) -> None:
    busted = run(cached, tmp_path / "busted", WorkloadSpec(), requests=24)
    cache = busted.summary.cache
    assert busted.manifest.workload.cache_bust is True and cache.busted is True
    assert cache.source == "usage" and cache.requests_reporting == 24
    assert cache.hit_rate < 0.1
    # The same 12 prompts, not busted: from the second round on they hit the cache.
    plain = run(cached, tmp_path / "plain", WorkloadSpec(cache_bust=False), requests=24)
    assert plain.summary.cache.hit_rate > 0.3
    assert any(w.message.startswith("prefix cache:") and "--cache-bust" in w.message for w in plain.summary.warnings)
    assert "cache.prefix_hits" in [w.code for w in plain.summary.warnings]
    # The fake server runs in this process, so on a busy 2-core machine the process can pass the
    # client-load limit; that warning is true and is not what this test is about.
    assert [w.code for w in busted.summary.warnings if w.code not in ("client.bound", "stats.tail_unbounded")] == []


def test_a_shared_prefix_is_served_from_cache(cached: FakeServerThread, tmp_path: Path) -> None:
    r = run(cached, tmp_path / "prefix", WorkloadSpec(shared_prefix_tokens=64, prefix_groups=2), requests=16)
    log = cached.log(wait_idle_s=5)
    assert r.summary.cache.busted is True  # busted after the prefix: only the prefix is shared
    assert r.summary.cache.hit_rate > 0.2
    assert sum(1 for e in log if e["cached_tokens"]) >= 12  # all but the first of each group, about


def test_sessions_carry_history_turns_and_header(cached: FakeServerThread, tmp_path: Path) -> None:
    spec = WorkloadSpec(turns=parse_turns("3"), session_header="X-Session-ID")
    r = run(cached, tmp_path / "sessions", spec, requests=4, concurrency=2)
    lines = [x for x in records(r) if x["phase"] == "measure"]
    assert len(lines) == 12 and sorted({x["session_id"] for x in lines}) == ["s1", "s2", "s3", "s4"]
    for sid in ("s1", "s4"):
        assert [x["turn"] for x in lines if x["session_id"] == sid] == [1, 2, 3]
    log = cached.log(wait_idle_s=5)
    by_session: dict[str, list[int]] = {}
    for e in log:
        by_session.setdefault(e["session_id"], []).append(e["messages"])
    # system tag + user, then + answer + user each turn: the real answers are in the history
    assert all(counts == [2, 4, 6] for counts in by_session.values()), by_session
    turns = r.summary.by_turn
    assert [t.turn for t in turns] == [1, 2, 3] and all(t.requests == 4 for t in turns)
    assert turns[0].cache_hit_rate < 0.2 < turns[2].cache_hit_rate  # later turns reuse their own history
    assert r.manifest.workload.kind == "sessions"


def test_a_sessions_file_replays_its_user_turns(cached: FakeServerThread, tmp_path: Path) -> None:
    path = ROOT / "examples" / "conversations.sharegpt.json"
    r = run(cached, tmp_path / "file", WorkloadSpec(sessions_file=str(path)), requests=None)
    doc = json.loads(path.read_text())
    user_turns = sum(1 for c in doc for m in c["conversations"] if m["from"] in ("human", "user"))
    assert r.summary.requests.total == user_turns
    assert r.manifest.workload.cache_bust is False


@pytest.mark.slow
def test_a_trace_is_replayed_at_its_times(tmp_path: Path) -> None:
    path = ROOT / "examples" / "trace.mooncake.jsonl"
    trace = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    speed = 20.0
    with FakeServerThread({**CACHE, "output_tokens": 2}) as srv:
        r = run(srv, tmp_path / "trace", WorkloadSpec(trace_file=str(path), trace_speed=speed), requests=None)
        log = sorted(srv.log(wait_idle_s=5), key=lambda e: e["arrival_ns"])
    assert r.summary.requests.total == len(trace)
    want = np.array([(t["timestamp"] - trace[0]["timestamp"]) / 1000 / speed for t in trace])
    got = np.array([(e["arrival_ns"] - log[0]["arrival_ns"]) / 1e9 for e in log])
    # Align on the median offset, so one late first arrival does not shift every other error.
    diff_ms = (got - np.sort(want)) * 1000
    err_ms = np.abs(diff_ms - np.median(diff_ms))
    assert float(np.median(err_ms)) < 5.0, err_ms  # a few ms on a shared 2-core machine
    assert float(np.percentile(err_ms, 99)) < 50.0, err_ms  # generous: CI shares 2 cores with other jobs
    assert r.summary.cache.hit_rate > 0  # the trace's shared hash ids share blocks
    assert [x["max_tokens"] for x in records(r)] == [t["output_length"] for t in trace]


def test_cancelled_requests_stay_out_of_the_error_rate(tmp_path: Path) -> None:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 2, "output_tokens": 40}) as srv:
        r = run(srv, tmp_path / "cancel", WorkloadSpec(), requests=30, cancel_rate=0.5)
    s = r.summary
    assert 5 <= s.requests.cancelled <= 25
    assert s.requests.total + s.requests.cancelled == 30 and s.error_rate == 0.0
    cancelled = [x for x in records(r) if x["error_kind"] == "cancelled"]
    assert all(1 <= len(x["chunk_offsets_ms"]) <= 8 for x in cancelled)


@pytest.mark.slow
def test_rate_stages_and_ramp_shape_the_schedule(tmp_path: Path) -> None:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0.2, "output_tokens": 2}) as srv:
        staged = run(srv, tmp_path / "stages", WorkloadSpec(), requests=None, stages=parse_stages("1s@5,1s@30"))
        ramp = run(srv, tmp_path / "ramp", WorkloadSpec(), requests=40, rate=40.0, ramp_s=1.0, arrival="constant")
    starts = [x["intended_start_ms"] for x in records(staged)]
    first, second = sum(1 for t in starts if t is not None and t - starts[0] < 1000), len(starts)
    assert 1 <= first <= 12 and second - first >= 15  # ~5 then ~30
    assert staged.summary.offered_rate is None  # no single rate was offered
    gaps = np.diff([x["intended_start_ms"] for x in records(ramp)])
    assert gaps[0] > 3 * gaps[-1]  # sparse while ramping, dense at full rate


@pytest.mark.slow
def test_concurrency_stages(tmp_path: Path) -> None:
    with FakeServerThread({"ttft_ms": 20, "itl_ms": 1, "output_tokens": 2}) as srv:
        stages = parse_stages("1s@1,1s@4", "concurrency")
        r = run(srv, tmp_path / "cstages", WorkloadSpec(), requests=None, stages=stages, stages_kind="concurrency")
    assert r.summary.max_in_flight == 4


@pytest.mark.slow
def test_workload_flags_are_checked_before_any_connection(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "tokenrace", "bench", "--url", "http://127.0.0.1:9", "--turns", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 2 and "turns" in p.stderr and "connect" not in p.stderr.lower(), p.stderr


def test_compare_table_and_report_show_the_cache(cached: FakeServerThread, tmp_path: Path) -> None:
    busted = run(cached, tmp_path / "a", WorkloadSpec(), requests=24)
    plain = run(cached, tmp_path / "b", WorkloadSpec(cache_bust=False), requests=24)
    lines = headline_lines(plain.summary)
    assert any(x.startswith("prefix cache hit rate: ") and "prompts not busted" in x for x in lines), lines
    assert any("prompts busted" in x for x in headline_lines(busted.summary))
    report = compare([load(busted.directory), load(plain.directory)])
    text = " ".join(report.warnings + report.comparisons[0].warnings)
    assert "prefix cache hit rate differs" in text and "cache busting differs" in text
    row = next(r for r in report.comparisons[0].rows if r.metric == "cache.hit_rate")
    assert row.b is not None and row.a is not None and row.change == pytest.approx(row.b - row.a)
    page = write([load(plain.directory)], tmp_path / "r.html", None, None).read_text()
    assert "prefix cache" in page and "What a sceptic would ask" in page


def test_the_report_shows_cancelled_requests(tmp_path: Path) -> None:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 2, "output_tokens": 40}) as srv:
        r = run(srv, tmp_path / "cancel", WorkloadSpec(), requests=30, cancel_rate=0.5)
    n = r.summary.requests.cancelled
    assert n > 0
    assert any(f"cancelled by the client: {n}" in x for x in headline_lines(r.summary))
    assert f"cancelled by the client: {n}" in build([load(r.directory)])  # the terminal's words


def test_the_sweep_report_has_a_cached_column(cached: FakeServerThread, tmp_path: Path) -> None:
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(cached.base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=8),
        load=Load(requests=12, cold=False),
        workload=WorkloadSpec(cache_bust=False),  # the built-in prompts repeat: later steps hit
        output=tmp_path / "sweep",
    )
    sweep = asyncio.run(run_sweep(settings, SweepPlan(values=(1, 2), stop_early=False)))
    rates = [row.cache_hit_rate for row in sweep.sweep.steps]
    assert rates[-1] is not None and rates[-1] > 0.3
    page = build([load(sweep.directory)])
    table = page[page.index("<table") : page.index("</table>")]
    # The HTML's step table is the terminal's: a "cached" column in whole per cent.
    assert "<th class='num'>cached</th>" in table
    assert f"{rates[-1] * 100:.0f} %" in re.findall(r"<td class='num'>([^<]*)</td>", table)


def test_a_public_dump_with_bad_entries_stops_or_is_skipped_with_a_count(
    cached: FakeServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    good = {"id": "ok", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
    bad = [{"id": "empty", "conversations": []}, {"id": "gpt-first", "conversations": [{"from": "gpt", "value": "x"}]}]
    path = tmp_path / "dump.json"
    path.write_text(json.dumps([good, *bad, good | {"id": "ok2"}]))
    args = ["bench", "--url", cached.base_url, "--sessions", str(path), "--max-tokens", "4", "--no-cold"]
    code, _, err = in_process(capsys, *args, "-o", str(tmp_path / "strict"))
    assert code == 2 and "entry 1" in err and len(err.strip().splitlines()) == 1
    code, _, err = in_process(capsys, *args, "--skip-invalid-sessions", "-o", str(tmp_path / "skip"), "--json")
    assert code == 0, err
    manifest = json.loads((tmp_path / "skip" / "manifest.json").read_text())
    notes = manifest["workload"]["notes"]
    assert notes[0] == "2 conversations skipped (--skip-invalid-sessions)" and len(notes) == 3
    assert json.loads((tmp_path / "skip" / "summary.json").read_text())["requests"]["total"] == 2
    code, _, err = in_process(capsys, "bench", "--url", cached.base_url, "--skip-invalid-sessions")
    assert code == 2 and "--skip-invalid-sessions applies to a --sessions file" in err


def test_skipped_notes_count_all_and_list_the_first_few() -> None:
    assert skipped_notes(()) == ()
    notes = skipped_notes(tuple(f"entry {i}: empty" for i in range(MAX_SKIPPED_NOTES + 5)))
    assert notes[0].startswith(f"{MAX_SKIPPED_NOTES + 5} conversations skipped")
    assert notes[-1] == "... and 5 more" and len(notes) == MAX_SKIPPED_NOTES + 2
