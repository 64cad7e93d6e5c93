"""The runner against a server that answers a known share right: the measured accuracy's CI covers it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.quality.fake_answers import AnswerServer, behaviour

from tokenrace.errors import PreflightError, UsageError
from tokenrace.model.files import ITEMS
from tokenrace.quality.models import QualityResult, load_quality, read_items
from tokenrace.quality.paired import compare_dirs
from tokenrace.quality.runner import QualitySettings, run_quality
from tokenrace.quality.suites import Item, resolve_suites
from tokenrace.serve.process import free_port


def run(items: list[Item], url: str, out: Path, concurrency: int = 1, model: str | None = None) -> QualityResult:
    settings = QualitySettings(base_url=url, concurrency=concurrency, model=model)
    return asyncio.run(run_quality(items, settings, out))


@pytest.mark.parametrize("share", [0.3, 0.7])
def test_measured_accuracy_covers_the_configured_share(tmp_path: Path, share: float) -> None:
    items = resolve_suites([], 40, 1)  # 240 items over the six suites
    with AnswerServer(behaviour(items, share, seed=2)) as srv:
        result = run(items, srv.url, tmp_path / "r", concurrency=4)
        bodies = srv.behaviour.bodies
    acc = result.overall.accuracy
    assert acc.n == 240 and acc.ci_low is not None and acc.ci_high is not None
    assert acc.ci_low < share < acc.ci_high
    assert acc.ci_high - acc.ci_low < 0.13  # n=240 pins it to about +-6 points
    # Defaults: temperature 0 and the fixed seed, on every request; each item its own max_tokens.
    assert {b["temperature"] for b in bodies} == {0.0} and {b["seed"] for b in bodies} == {0}
    assert all("max_tokens" in b for b in bodies)
    # Files: every item streamed to items.jsonl, quality.json loads back.
    lines = (tmp_path / "r" / ITEMS).read_text().splitlines()
    assert len(lines) == 240
    first = json.loads(lines[0])
    assert {"prompt", "output", "expected", "verdict", "e2e_ms", "ttft_ms", "output_tokens"} <= first.keys()
    loaded = load_quality(tmp_path / "r")
    assert loaded is not None and loaded.schema_version == 1
    assert loaded.overall.accuracy == acc and set(loaded.suites) == {i.suite for i in items}
    assert loaded.speed.output_tokens_per_s is not None and loaded.speed.ttft_ms_p50 is not None


def test_failed_requests_are_reported_apart_not_wrong(tmp_path: Path) -> None:
    items = resolve_suites(["arithmetic", "copy"], 15, 0)
    with AnswerServer(behaviour(items, 1.0, fail_every=5)) as srv:
        result = run(items, srv.url, tmp_path / "r")
    overall = result.overall
    assert overall.errors == 6 and overall.errors_by_kind == {"http_500": 6}
    assert overall.wrong == 0 and overall.right == 24
    assert overall.accuracy.value == 1.0 and overall.accuracy.n == 24
    errors = [r for r in read_items(tmp_path / "r") if r.verdict == "error"]
    assert len(errors) == 6 and all(r.error_kind == "http_500" and r.output is None for r in errors)


def test_unreachable_server_stops_after_the_first_record(tmp_path: Path) -> None:
    items = resolve_suites(["copy"], 3, 0)
    with pytest.raises(PreflightError, match="connection refused"):
        run(items, f"http://127.0.0.1:{free_port()}/v1", tmp_path / "r", model="m")
    records = read_items(tmp_path / "r")
    assert [r.error_kind for r in records] == ["connection_refused"]
    saved = load_quality(tmp_path / "r")
    assert saved is not None and saved.interrupted and saved.overall.errors == 1
    assert saved.overall.accuracy.value is None


def test_a_later_failure_does_not_stop_the_run(tmp_path: Path) -> None:
    items = resolve_suites(["copy"], 4, 0)
    with AnswerServer(behaviour(items, 1.0, fail_every=2)) as srv:
        result = run(items, srv.url, tmp_path / "r")
    assert result.overall.errors == 2 and result.overall.right == 2 and not result.interrupted


def test_existing_run_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / ITEMS).write_text("")
    with pytest.raises(UsageError, match="already holds"):
        run(resolve_suites(["copy"], 1, 0), "http://127.0.0.1:9/v1", tmp_path / "r")


def test_paired_comparison_of_a_good_and_a_worse_server(tmp_path: Path) -> None:
    items = resolve_suites([], 25, 4)  # 150 items
    with AnswerServer(behaviour(items, 0.9, seed=1)) as good, AnswerServer(behaviour(items, 0.55, seed=2)) as bad:
        run(items, good.url, tmp_path / "a", concurrency=4)
        run(items, bad.url, tmp_path / "b", concurrency=4)
        run(items, good.url, tmp_path / "a2", concurrency=4)
    c = compare_dirs(tmp_path / "a", tmp_path / "b")
    p = c.paired
    assert p.n == 150 and p.both_right + p.only_a + p.only_b + p.both_wrong == 150
    assert c.verdict == "B worse" and p.p_value is not None and p.p_value < 0.001
    low, high = c.difference.ci_low, c.difference.ci_high
    assert low is not None and high is not None and low < -0.35 < high
    assert c.agreement.exact_match_rate is not None and c.agreement.exact_match_rate < 0.9
    # The same server twice: identical answers, no difference, full agreement.
    same = compare_dirs(tmp_path / "a", tmp_path / "a2")
    assert same.verdict == "within noise" and same.paired.only_a == same.paired.only_b == 0
    assert same.agreement.exact_match_rate == 1.0 and same.agreement.token_similarity == 1.0
    assert same.paired.p_value == 1.0


def test_compare_refuses_different_items(tmp_path: Path) -> None:
    a_items, b_items = resolve_suites(["copy"], 5, 0), resolve_suites(["copy"], 5, 1)
    with AnswerServer(behaviour(a_items + b_items, 1.0)) as srv:
        run(a_items, srv.url, tmp_path / "a")
        run(b_items, srv.url, tmp_path / "b")
    with pytest.raises(UsageError, match="share no item"):
        compare_dirs(tmp_path / "a", tmp_path / "b")
