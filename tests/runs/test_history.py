"""The SQLite run history, `tokenrace runs` and `tokenrace show`."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import in_process
from tests.sweep.helpers import bench

from tokenrace.errors import UsageError
from tokenrace.runs.history import SCHEMA_VERSION, Filters, History, history_path, run_id


def test_location_is_tokenrace_home_and_schema_is_recorded(tokenrace_home: Path) -> None:
    assert history_path() == tokenrace_home / "history.sqlite"
    History.open().close()
    conn = sqlite3.connect(history_path())
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)


def test_a_newer_schema_is_refused_in_one_line(tokenrace_home: Path) -> None:
    tokenrace_home.mkdir(parents=True)
    conn = sqlite3.connect(history_path())
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(UsageError, match="newer tokenrace"):
        History.open()


def test_index_list_filter_resolve(fake: Any, tmp_path: Path) -> None:
    a = bench(fake.base_url, tmp_path / "runs" / "a", label="alpha", concurrency=2)
    b = bench(fake.base_url, tmp_path / "runs" / "nested" / "b", label="beta")
    with History.open() as h:
        ids = h.import_tree(tmp_path / "runs")
        assert sorted(ids) == sorted([run_id(a.directory), run_id(b.directory)])
        rows = h.list()
        assert [r.label for r in rows] == ["beta", "alpha"]  # newest first
        ra = next(r for r in rows if r.label == "alpha")
        assert ra.model == "fake-model" and ra.concurrency == 2 and ra.requests == 8
        assert ra.ttft_p50_ms == a.summary.metrics.ttft_ms.p50
        assert [r.label for r in h.list(Filters(label="alp"))] == ["alpha"]
        assert len(h.list(Filters(model="fake", endpoint="127.0.0.1"))) == 2
        assert h.list(Filters(model="llama")) == []
        today = ra.started_at[:10]
        assert len(h.list(Filters(since=today, until=today))) == 2
        assert h.list(Filters(until="2000-01-01")) == []
        assert h.resolve(ra.id[:6]) == a.directory.resolve()
        assert h.resolve("b") == b.directory.resolve()
        # A directory named like another run's id prefix: the exact name wins (the id is a hash of
        # the path, so before this rule "b" above failed whenever run a's id happened to start with b).
        c = bench(fake.base_url, tmp_path / "runs" / ra.id[:3], label="gamma")
        h.import_tree(tmp_path / "runs")
        assert h.resolve(ra.id[:3]) == c.directory.resolve()
        assert h.resolve(ra.id) == a.directory.resolve()
        with pytest.raises(UsageError, match="no run directory"):
            h.resolve("nothing-like-this")
        with pytest.raises(UsageError, match="--since"):
            h.list(Filters(since="yesterday"))


def test_reindex_forgets_deleted_directories(fake: Any, tmp_path: Path) -> None:
    a = bench(fake.base_url, tmp_path / "a")
    b = bench(fake.base_url, tmp_path / "b")
    with History.open() as h:
        h.index(a.directory)
        h.index(b.directory)
        shutil.rmtree(b.directory)
        assert h.reindex() == (1, 1)
        assert [r.path for r in h.list()] == [str(a.directory.resolve())]


def test_not_a_run_directory_is_a_clear_error(tmp_path: Path) -> None:
    with History.open() as h, pytest.raises(UsageError, match="not a run, sweep or profile directory"):
        h.index(tmp_path)


def test_runs_and_show_commands(fake: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = bench(fake.base_url, tmp_path / "r1", label="shown")
    p = in_process(capsys, "runs", "--import", str(tmp_path / "r1"))
    assert p.returncode == 0, p.stderr
    assert "shown" in p.stdout and "fake-model" in p.stdout and "indexed 1 entries" in p.stderr
    p = in_process(capsys, "runs", "--json", "--label", "shown")
    rows = json.loads(p.stdout)
    assert len(rows) == 1 and rows[0]["path"] == str(run.directory.resolve())
    p = in_process(capsys, "show", rows[0]["id"])
    assert p.returncode == 0, p.stderr
    assert "TTFT" in p.stdout and "requests: 8/8 ok" in p.stdout and "concurrency 1" in p.stdout
    p = in_process(capsys, "show", str(run.directory), "--json")
    assert json.loads(p.stdout) == run.summary.model_dump(mode="json")
    p = in_process(capsys, "show", "no-such-run")
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1
