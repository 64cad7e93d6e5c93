"""claim.json as a file: a claim written before its figures and checks were typed reads back to the
same JSON, validates against docs/schema, and `show` and `runs` find it (the verdict, the sentence,
every condition against the expectations; the claim's runs listed beneath it)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from tests.conftest import in_process
from tests.sweep.helpers import bench

from tokenrace.claim.models import ClaimFile, read_claim
from tokenrace.errors import UsageError
from tokenrace.model.schema import schema_name
from tokenrace.runs.history import SCHEMA_VERSION, Filters, History, history_path

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schema" / schema_name("claim.json")


def check(objective: str, name: str, value: float, held: bool) -> dict[str, Any]:
    return {
        "objective": objective,
        "name": name,
        "value": value,
        "ci_low": round(value * 0.9, 4),
        "ci_high": round(value * 1.1, 4),
        "held": held,
        "clear": True,
    }


def run_figures(ttft: float) -> dict[str, Any]:
    return {
        "requests": 10,
        "error_rate": 0.0,
        "ttft_ms_p50": ttft,
        "ttft_ms_p99": ttft * 1.5,
        "tpot_ms_p50": 10.0,
        "e2e_ms_p50": ttft + 300,
        "output_tok_s_per_user_p50": 100.0,
        "output_tok_s": 95.5,
        "prompt_tokens_mean": 96.0,
    }


EXPECT = "ttft_p99<=150ms"
ERRORS = "error_rate<=0.05"
ACCURACY = {"value": 0.25, "ci_low": 0.05, "ci_high": 0.7, "n": 4}
SCORE = {"accuracy": ACCURACY, "right": 1, "wrong": 3, "errors": 0, "errors_by_kind": {}}
# A claim.json as the battery wrote it before its figures and checks had types: each condition has
# the figures it measured and no others (no p99 in a search step, the cold request's own three).
OLD_CLAIM: dict[str, Any] = {
    "schema_version": 1,
    "kind": "claim",
    "tool": "tokenrace",
    "version": "0.9.0",
    "endpoint": "http://127.0.0.1:8000/v1",
    "provider": None,
    "model": "fake-model",
    "directory": "/tmp/c",
    "started_at": "2026-01-02T03:04:05+00:00",
    "finished_at": "2026-01-02T03:07:05+00:00",
    "budget_s": 180.0,
    "max_requests": None,
    "max_cost_usd": None,
    "expectations": [
        {"figure": "ttft", "stat": "p99", "op": "<=", "limit": 150.0, "text": EXPECT, "guard": False},
    ],
    "plan": [
        {"dimension": "warm", "requests": 11, "seconds": 27.0, "usd": None, "max_concurrency": None},
        {"dimension": "concurrency", "requests": 512, "seconds": 45.0, "usd": None, "max_concurrency": 16},
    ],
    "verdict": "holds_only_under",
    "sentence": "Holds only under: concurrency ≤ 4. At concurrency 5, TTFT p99 is 412 ms [371, 453].",
    "reasons": ["at concurrency 5, TTFT p99 is 412 ms [371, 453]"],
    "restrictions": ["concurrency ≤ 4"],
    "conditions": [
        {
            "dimension": "cold",
            "value": "first request",
            "held": True,
            "figures": {"ttft_ms": 48.2, "e2e_ms": 350.1, "error_kind": None},
            "checks": [check(EXPECT, "ttft_p99", 48.2, True)],
            "run_dir": "warm",
            "skipped": None,
            "note": None,
        },
        {
            "dimension": "warm",
            "value": 1,
            "held": True,
            "figures": run_figures(45.123456),
            "checks": [check(EXPECT, "ttft_p99", 60.1234, True), check(ERRORS, "error_rate", 0.0, True)],
            "run_dir": "warm",
            "skipped": None,
            "note": None,
        },
        {
            "dimension": "concurrency",
            "value": 5,
            "held": False,
            "figures": {k: v for k, v in run_figures(300.0).items() if k != "ttft_ms_p99"},
            "checks": [check(EXPECT, "ttft_p99", 412.3456, False)],
            "run_dir": "concurrency/c5",
            "skipped": None,
            "note": "unclear: an interval reaches over a limit",
        },
        {
            "dimension": "drift",
            "value": "end of the budget",
            "held": True,
            "figures": {
                **run_figures(46.0),
                "vs_warm": {"ttft_ms_p50": 1.0194, "tpot_ms_p50": 1.0, "e2e_ms_p50": None, "output_tok_s": 0.98},
            },
            "checks": [check(EXPECT, "ttft_p99", 70.0, True)],
            "run_dir": "drift",
            "skipped": None,
            "note": None,
        },
        {
            "dimension": "quality",
            "value": "4 items",
            "held": None,
            "figures": {"accuracy": ACCURACY, "right": 1, "wrong": 3},
            "checks": [],
            "run_dir": "quality",
            "skipped": None,
            "note": "reported beside the speed; not part of the verdict",
        },
        {
            "dimension": "content",
            "value": None,
            "held": None,
            "figures": {},
            "checks": [],
            "run_dir": None,
            "skipped": "the budget: it needs about 9 s, 2 s were left",
            "note": None,
        },
    ],
    "limits": {
        "concurrency": 4,
        "concurrency_certain": True,
        "concurrency_failing": 5,
        "prompt_tokens": None,
        "prompt_tokens_failing": None,
    },
    "partial": False,
    "requests_sent": 321,
    "elapsed_s": 179.5,
    "quality": {"overall": SCORE, "suites": {"arithmetic": SCORE}},
}


def write_claim(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "claim.json").write_text(json.dumps({**OLD_CLAIM, "directory": str(directory)}))
    return directory


def like(dumped: Any, old: Any) -> Any:
    """`dumped` cut to the keys `old` has, after checking that every key it adds is empty (a field
    added since, such as a check's outcome, reads as null or an empty list from an older file)."""
    if isinstance(old, dict):
        added = {k: v for k, v in dumped.items() if k not in old}
        assert all(v in (None, [], {}) for v in added.values()), added
        return {k: like(dumped[k], v) for k, v in old.items()}
    if isinstance(old, list):
        return [like(d, o) for d, o in zip(dumped, old, strict=True)]
    return dumped


def test_an_older_claim_reads_back_to_the_same_json_and_fits_the_schema() -> None:
    claim = ClaimFile.model_validate(OLD_CLAIM)
    assert like(claim.model_dump(mode="json"), OLD_CLAIM) == OLD_CLAIM  # the same keys, the same values
    assert claim.conditions[0].figures.get("ttft_ms_p50") is None  # the cold request has none
    assert claim.conditions[2].checks[0].value == 412.3456 and claim.conditions[2].checks[0].held is False
    assert claim.conditions[4].figures["accuracy"].n == 4
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [e.message for e in validator.iter_errors(OLD_CLAIM)] == []
    wrong = {**OLD_CLAIM, "conditions": [{**OLD_CLAIM["conditions"][0], "held": "yes"}]}
    assert list(validator.iter_errors(wrong))  # the schema does check the conditions


def test_show_prints_the_verdict_the_sentence_and_every_condition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = write_claim(tmp_path / "c")
    p = in_process(capsys, "show", str(d))
    assert p.returncode == 0, p.stderr
    assert "HOLDS ONLY UNDER: fake-model @ http://127.0.0.1:8000/v1" in p.stdout
    assert "Holds only under: concurrency ≤ 4." in p.stdout and "321 requests in 179.5 s" in p.stdout
    assert "✗ 412.3 [371.1, 453.6]" in p.stdout and "left out" not in p.stdout
    assert "quality (beside, not in the verdict): accuracy 25.0 %" in p.stdout

    p = in_process(capsys, "show", str(d), "--markdown")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("### HOLDS ONLY UNDER: fake-model")
    assert f"| condition | value | {EXPECT} | outcome | run / why not |" in p.stdout
    assert "| concurrency | 5 | ✗ 412.3 [371.1, 453.6] | no | concurrency/c5 (unclear:" in p.stdout
    assert "Holds only under: concurrency ≤ 4." in p.stdout

    p = in_process(capsys, "show", str(d), "--csv")
    assert p.returncode == 0, p.stderr
    rows = list(csv.reader(io.StringIO(p.stdout)))
    assert rows[0] == ["condition", "value", EXPECT, "outcome", "run / why not"]
    by_condition = {r[0]: r for r in rows[1:]}
    assert by_condition["concurrency"][2] == "412.3456"  # the figure itself, unrounded, in ms
    assert by_condition["content"][1:4] == ["", "", "skipped"]  # missing is empty, never 0

    p = in_process(capsys, "show", str(d), "--json")
    saved = json.loads((d / "claim.json").read_text())
    assert like(json.loads(p.stdout), saved) == saved


def test_runs_lists_a_claim_with_its_verdict_and_its_runs_beneath(
    fake: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    d = write_claim(tmp_path / "c")
    bench(fake.base_url, d / "warm", label="the baseline")  # a run of the claim, indexed on its own
    p = in_process(capsys, "runs", "--import", str(d))
    assert p.returncode == 0, p.stderr
    assert "indexed 2 entries" in p.stderr
    assert "claim" in p.stdout and "HOLDS ONLY UNDER" in p.stdout and "the baseline" not in p.stdout
    p = in_process(capsys, "runs", "--json", "--kind", "claim")
    (row,) = json.loads(p.stdout)
    assert row["verdict"] == "holds_only_under" and row["model"] == "fake-model" and row["steps"] == 4
    assert row["ttft_p50_ms"] == 45.123456 and row["error_rate"] == 0.0  # the baseline's
    with History.open() as h:
        (child,) = h.list(Filters(steps=True, kind="run"))
    assert child.parent_id == row["id"] and child.label == "the baseline"
    p = in_process(capsys, "show", row["id"])
    assert p.returncode == 0 and "HOLDS ONLY UNDER" in p.stdout, p.stderr
    p = in_process(capsys, "compare", str(d), str(d / "warm"))
    assert p.returncode == 2 and "holds a claim" in p.stderr and "Traceback" not in p.stderr


def test_read_claim_names_the_file_that_is_not_a_claim(tmp_path: Path) -> None:
    (tmp_path / "claim.json").write_text(json.dumps({"kind": "claim", "budget_s": "soon", "expectations": []}))
    with pytest.raises(UsageError, match=r"claim\.json: not a tokenrace claim\.json \(budget_s: "):
        read_claim(tmp_path)


def test_a_history_of_the_previous_schema_gains_the_verdict_column(tmp_path: Path, tokenrace_home: Path) -> None:
    tokenrace_home.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(history_path())
    conn.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, path TEXT UNIQUE NOT NULL, kind TEXT NOT NULL, parent_id TEXT, name TEXT,
            label TEXT, endpoint TEXT, provider TEXT, model TEXT, source TEXT, version TEXT,
            started_at TEXT, finished_at TEXT, concurrency REAL, rate REAL, requests INTEGER, error_rate REAL,
            ttft_p50_ms REAL, ttft_p95_ms REAL, tpot_p50_ms REAL, e2e_p95_ms REAL, output_tokens_per_s REAL,
            cache_hit_rate REAL, steps INTEGER, knee TEXT, indexed_at TEXT NOT NULL
        );
        INSERT INTO runs (id, path, kind, indexed_at) VALUES ('abc', '/gone', 'run', '2026-01-01');
        PRAGMA user_version = 2;
        """
    )
    conn.close()
    with History.open() as h:
        (rid,) = h.index(write_claim(tmp_path / "c"))
        row = h.get(rid)
        assert row is not None and row.verdict == "holds_only_under"
        assert h.get("abc") is not None  # the rows already there stay
    assert sqlite3.connect(history_path()).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
