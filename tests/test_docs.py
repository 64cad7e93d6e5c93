"""The docs match the code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tokenrace.figures.summary import summarize
from tokenrace.load.windows import Windows
from tokenrace.model.metrics import FIGURES, METRICS

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_cli_md_is_generated_from_current_help(tmp_path: Path) -> None:
    before = (ROOT / "docs" / "cli.md").read_text()
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py")], check=True, timeout=120)
    after = (ROOT / "docs" / "cli.md").read_text()
    assert before == after, "docs/cli.md is stale: run python scripts/gen_cli_docs.py and commit it"


def test_every_summary_metric_is_defined_in_metrics_md() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    s = summarize([], Windows(), slo={"ttft_ms": 1})
    for name in type(s.metrics).model_fields:
        assert f"`{name}`" in text, name
    for key in (
        "error_rate",
        "errors_by_kind",
        "offered_rate",
        "achieved_rate",
        "max_in_flight",
        "token_count_source",
        "server_vs_client",
    ):
        assert key in text, key
    for key in type(s.throughput).model_fields:
        assert f"throughput.{key}" in text, key
    for key in type(s).model_fields:  # every section of summary.json, a new one included
        assert f"`{key}" in text, key


def test_every_declared_metric_has_its_row_and_unit_in_metrics_md() -> None:
    """Each metric's and section figure's declaration (model/metrics.py) names it and its unit as a
    table row of metrics.md does."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in (ROOT / "docs" / "metrics.md").read_text().splitlines()
        if line.startswith("|")
    ]
    declared = [(m.name, m.unit) for m in METRICS] + [(f.name, f.unit) for f in FIGURES]
    for name, unit in declared:
        assert any(f"`{name}`" in row[0] and len(row) > 1 and row[1] == unit for row in rows), (name, unit)


def _human_documents() -> list[Path]:
    """Every text a reader meets: README, docs/, examples, and the package's own docstrings and data."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder, patterns in (("src", ("*.py", "*.json", "*.toml", "*.md")), ("examples", ("*",))):
        for pattern in patterns:
            files += sorted(p for p in (ROOT / folder).rglob(pattern) if p.is_file())
    return files


def test_docs_speak_of_the_project_alone() -> None:
    """No document points at a file outside the repo (DEVELOPERS.md) or at an issue tracker's number."""

    outside = re.compile(r"DEVELOPERS\.md|\bissues?\s+#?\d+\b", re.IGNORECASE)
    found = []
    for path in _human_documents():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if outside.search(line):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not found, "\n".join(found)
    assert outside.search("as issue 3 says") and outside.search("see DEVELOPERS.md")  # the pattern bites
