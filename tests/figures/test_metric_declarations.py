"""The metrics' declarations (model/metrics.py) are what `Summary.metrics` and the summary table hold."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

from pydantic import BaseModel
from tests.figures.test_summary import rec

from tokenrace.figures.pooling import not_measured
from tokenrace.figures.summary import summarize
from tokenrace.load.windows import Windows
from tokenrace.model.metrics import FIGURES, METRICS, SectionFigure
from tokenrace.model.summary import Metrics, Summary
from tokenrace.report.tables import summary_table


def test_every_metrics_field_has_exactly_one_declaration_and_back() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(Metrics.model_fields)


def test_each_metric_pools_the_requests_its_declaration_names() -> None:
    # A succeeded request and a failed one that opened a connection and was late to leave.
    ok = rec(0, 0, [100, 110, 130], [1, 2, 4], 7, connect_ns=2_000_000, intended_start_ns=0)
    failed = rec(1, 5, [], None, None, error_kind="http_500", connect_ns=3_000_000, intended_start_ns=0)
    s = summarize([ok, failed], Windows())
    for m in METRICS:
        stats = getattr(s.metrics, m.name)
        if m.value is None:  # pooled over the chunks of the succeeded request
            assert stats.count, m.name
            continue
        records = [ok] if m.over == "succeeded" else [ok, failed]
        values = [v for r in records if (v := m.value(r)) is not None]
        assert stats.count == len(values), m.name
        if values:
            assert stats.max == max(values), m.name
    assert s.metrics.connect_ms.count == 2 and s.metrics.ttft_ms.count == 1


def test_summary_table_rows_are_the_declared_displays() -> None:
    ok = rec(0, 0, [100, 110, 130], [1, 2, 4], 7, prompt_tokens=12, cached_tokens=4, intended_start_ns=0)
    table = summary_table(summarize([ok], Windows()))
    shown = [(str(row.cells[0].value), str(row.cells[1].value)) for row in table.rows]
    declared = [(m.display.label, m.display.unit) for m in METRICS if m.display]
    assert shown == declared


def test_streamed_metrics_are_the_ones_an_unstreamed_answer_lacks() -> None:
    # One body: no chunks, no first token; usage gave the output count.
    body = rec(0, 0, [], None, 5)
    m = summarize([body], Windows()).metrics
    streamed = set(not_measured("chat", stream=False))
    assert streamed == {d.name for d in METRICS if d.streamed}
    assert all(getattr(m, name).count == 0 for name in streamed)
    assert m.e2e_ms.count == 1 and m.output_tokens.count == 1


def test_every_section_figure_names_a_field_of_summary_json() -> None:
    for figure in FIGURES:
        model: type[BaseModel] = Summary
        *sections, field = figure.name.split(".")
        for section in sections:
            annotation = model.model_fields[section].annotation
            # A section that is always there (throughput) is its model; an optional one, a union with None.
            kinds = get_args(annotation) or (annotation,)
            model = next(a for a in kinds if isinstance(a, type) and issubclass(a, BaseModel))
        assert field in model.model_fields, figure.name


# MLPerf's bounds and MLPerf Endpoints' figures keep their reference's own names (report/mlperf.py,
# report/reference.py): figures of their definitions, not a second label of a declared metric.
OWN_NAMES = {"mlperf.py", "reference.py"}


def _literals(path: Path) -> list[str]:
    """The string constants of a module, f-strings' pieces included, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_report_and_cli_write_no_second_label_of_a_declared_metric() -> None:
    """A declared metric's statistic is labelled by its declaration ("TTFT p50" is TTFT.label("p50")),
    never by a literal beside it in report/ or cli/."""
    src = Path(__file__).resolve().parents[2] / "src" / "tokenrace"
    labels = "|".join(re.escape(m.display.label) for m in METRICS if m.display)
    pattern = re.compile(rf"(?<!\w)({labels}) (p\d\d|mean|max)\b")
    found = [
        f"{path.relative_to(src)}: {literal!r}"
        for folder in ("report", "cli")
        for path in sorted((src / folder).glob("*.py"))
        if path.name not in OWN_NAMES
        for literal in _literals(path)
        if pattern.search(literal)
    ]
    assert not found


# Where report/ and cli/ name what a cell or a line shows: a table's column, a headline's figure,
# a step table's column, a comparison's row (its label is the second argument).
LABEL_ARGUMENT = {"Column": 0, "_col": 0, "Figure": 0, "Row": 1}


def _label_arguments(path: Path) -> list[str]:
    """The string literals a module passes as the label of a column, a figure or a row."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in LABEL_ARGUMENT:
            i = LABEL_ARGUMENT[n.func.id]
            arg = n.args[i] if len(n.args) > i else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append(arg.value)
    return out


def _names(figure: SectionFigure) -> set[str]:
    return {figure.display.label, figure.display.header}


def test_report_and_cli_write_no_second_label_of_a_declared_figure() -> None:
    """A section figure (the error rate, the prefix cache's hit rate, cost, goodput, efficiency...)
    is labelled by its declaration: no column, headline figure or comparison row of report/ or cli/
    spells a declared label or header ("cached" is CACHE_HIT_RATE.display.header), and no literal
    (an f-string's pieces included) is a label of several words ("error rate ", "decode efficiency").
    A one-word label ("goodput", "energy") is checked as a label only: the word also names a sweep's
    kind or a section."""
    src = Path(__file__).resolve().parents[2] / "src" / "tokenrace"
    names = {n for f in FIGURES for n in _names(f)}
    phrases = {n for n in names if " " in n}
    found = []
    for folder in ("report", "cli"):
        for path in sorted((src / folder).glob("*.py")):
            if path.name in OWN_NAMES:
                continue
            where = path.relative_to(src)
            found += [f"{where}: label {label!r}" for label in _label_arguments(path) if label.strip(" :") in names]
            found += [f"{where}: {literal!r}" for literal in _literals(path) if literal.strip(" :") in phrases]
    assert not found
