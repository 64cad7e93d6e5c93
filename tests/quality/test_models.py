"""Loading quality results back: what compare and the report will call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenrace.errors import UsageError
from tokenrace.quality.models import ItemResult, load_quality, read_items
from tokenrace.quality.scoring import accuracy_of, score, speed


def item(verdict: str, suite: str = "s", **kw: object) -> ItemResult:
    base: dict[str, object] = {"id": f"{suite}-{verdict}", "suite": suite, "prompt": "p", "expected": {}, "output": "o"}
    return ItemResult.model_validate({**base, "verdict": verdict, **kw})


def test_accuracy_of_nothing_is_null_not_zero() -> None:
    a = accuracy_of(0, 0)
    assert a.value is None and a.ci_low is None and a.ci_high is None and a.n == 0
    s = score([item("error", error_kind="timeout_total")])
    assert s.accuracy.value is None and s.errors == 1 and s.errors_by_kind == {"timeout_total": 1}


def test_speed_ignores_failed_requests_and_missing_figures() -> None:
    items = [
        item("right", ttft_ms=100.0, tpot_ms=10.0, e2e_ms=1000.0, output_tokens=50),
        item("wrong", ttft_ms=300.0, tpot_ms=30.0, e2e_ms=3000.0, output_tokens=50),
        item("error", ttft_ms=9999.0, e2e_ms=9999.0, output_tokens=1),
    ]
    sp = speed(items)
    assert sp.requests == 2 and sp.ttft_ms_p50 == 200.0 and sp.tpot_ms_p50 == 20.0
    assert sp.output_tokens_per_s == pytest.approx(100 / 4.0)
    assert speed([item("error")]).output_tokens_per_s is None


def test_load_quality_none_for_other_directories(tmp_path: Path) -> None:
    assert load_quality(tmp_path) is None
    (tmp_path / "quality.json").write_text(json.dumps({"kind": "something-else"}))
    assert load_quality(tmp_path) is None


def test_load_quality_refuses_a_newer_schema(tmp_path: Path) -> None:
    (tmp_path / "quality.json").write_text(json.dumps({"kind": "quality", "schema_version": 99}))
    with pytest.raises(UsageError, match="schema_version 99"):
        load_quality(tmp_path)


def test_read_items_keeps_lines_before_a_torn_last_line(tmp_path: Path) -> None:
    good = item("right").model_dump_json()
    (tmp_path / "items.jsonl").write_text(good + "\n" + good[:20])
    assert len(read_items(tmp_path)) == 1
    (tmp_path / "items.jsonl").write_text(good[:20] + "\n" + good + "\n")
    with pytest.raises(UsageError, match="items.jsonl:1"):
        read_items(tmp_path)
