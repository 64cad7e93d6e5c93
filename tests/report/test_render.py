"""One table declaration, four renderers: the terminal, HTML, Markdown and CSV show the same rows."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from tests.conftest import in_process
from tests.sweep.helpers import bench

from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.table import BLANK, Cell, Column, Table, num, pct, text, to_csv, to_html, to_markdown, to_rich


def sample() -> Table:
    t = Table("latency <ms>", [Column("metric", "left"), Column("p50"), Column("share"), Column("", "left")])
    t.add(text("TTFT"), num(1234.56), pct(0.5, 0), text("◀ knee", "best"), tone="best")
    t.add(text("TPOT | x"), num(None), pct(None), BLANK)
    t.add(text("count"), num(40), Cell(0.0123, 2, scale=100, suffix=" pp", sign=True), text(None))
    return t


def test_a_missing_value_is_a_dash_for_readers_and_empty_in_csv() -> None:
    t = sample()
    assert [c.text for c in t.rows[1].cells] == ["TPOT | x", "—", "—", ""]
    assert [c.text for c in t.rows[0].cells] == ["TTFT", "1,234.6", "50 %", "◀ knee"]
    assert t.rows[2].cells[1].text == "40" and t.rows[2].cells[2].text == "+1.23 pp"
    rows = list(csv.reader(io.StringIO(to_csv(t))))
    assert rows[0] == ["metric", "p50", "share", ""]
    assert rows[1] == ["TTFT", "1234.56", "50.0", "◀ knee"]  # unrounded, in the column's unit
    assert rows[2] == ["TPOT | x", "", "", ""] and rows[3][:3] == ["count", "40", "1.23"]
    for rendered in (to_markdown(t), to_html(t)):
        assert "None" not in rendered and "—" in rendered


def test_every_renderer_lays_out_the_same_rows() -> None:
    t = sample()
    md = to_markdown(t)
    assert md.splitlines()[:4] == [
        "### latency <ms>",
        "",
        "| metric | p50 | share |  |",
        "|---|---:|---:|---|",
    ]
    assert "| TPOT \\| x | — | — |  |" in md  # a pipe in a cell does not split it
    page = to_html(t)
    assert "<h3>latency &lt;ms&gt;</h3>" in page and "<tr class='knee'>" in page
    assert re.findall(r"<tr class='[a-z]*'><td class=''>([^<]+)</td>", page) == t.labels()
    assert "<td class='num'>1,234.6</td>" in page and "<td class='knee'>◀ knee</td>" in page
    console = Console(record=True, width=120)
    console.print(to_rich(t))
    printed = console.export_text()
    assert re.findall(r"^│ (\S[^│]*?) +│", printed, re.M) == t.labels()
    assert "1,234.6" in printed and "+1.23 pp" in printed and "None" not in printed


def test_show_prints_a_runs_and_a_sweeps_table_as_markdown_and_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8}) as srv:
        run = bench(srv.base_url, tmp_path / "run", label="md", requests=6, concurrency=2).directory
    code, out, err = in_process(capsys, "show", str(run), "--markdown")
    assert code == 0, err
    assert "| metric | unit | count | mean | p50 | p90 | p95 | p99 | max |" in out and "| TTFT | ms | 6 |" in out
    code, out, err = in_process(capsys, "show", str(run), "--csv")
    assert code == 0, err
    rows = {r["metric"]: r for r in csv.DictReader(io.StringIO(out))}
    assert rows["TTFT"]["count"] == "6" and float(rows["TTFT"]["p50"]) > 0 and rows["E2E"]["unit"] == "ms"
    code, printed, err = in_process(capsys, "show", str(run))
    assert code == 0, err
    # The manifest's table follows the summary's.
    summary_part, manifest_part = re.split(r"^manifest *$", printed, maxsplit=1, flags=re.M)
    assert re.findall(r"^│ (\S[^│]*?) +│", summary_part, re.M) == list(rows)  # the terminal's rows, in order
    assert re.findall(r"^│ (\S[^│]*?) +│", manifest_part, re.M)[:3] == ["endpoint", "model", "measured by"]


def test_runs_prints_its_table_for_the_terminal_and_as_markdown_and_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8}) as srv:
        run = bench(srv.base_url, tmp_path / "run", label="listed", requests=4, concurrency=2).directory
    code, out, err = in_process(capsys, "runs", "--import", str(run), "--markdown")
    assert code == 0, err
    header = "| id | kind | started (UTC) | name | model | endpoint | load | errors | TTFT p50 | tok/s | knee |"
    assert out.startswith(header) and "| run | " in out and "| listed | fake-model | http://127.0.0.1:" in out
    code, out, err = in_process(capsys, "runs", "--csv")
    assert code == 0, err
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert row["name"] == "listed" and row["load"] == "c=2" and row["errors"] == "0.0" and row["knee"] == ""
    assert float(row["TTFT p50"]) >= 5 and float(row["tok/s"]) > 0
    code, printed, err = in_process(capsys, "runs")
    assert code == 0, err
    assert re.findall(r"^│ (\S[^│]*?) +│", printed, re.M) == [row["id"]]
    assert "listed" in printed and "1 shown" in err
