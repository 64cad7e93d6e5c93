"""The summary's `tools` and `structured_output`: tool calls in the answers, and the share of
answers that met the response schema (None when none was checked, never 0)."""

from __future__ import annotations

from collections.abc import Sequence

from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import SchemaFigures, ToolFigures
from tokenrace.stats import describe, wilson


def tool_figures(ok: Sequence[RequestRecord]) -> ToolFigures | None:
    """None when no request offered tools."""
    offered = [r for r in ok if r.tool_calls is not None]
    if not offered:
        return None
    ttft = [r.ttft_tool_ms for r in offered if r.ttft_tool_ms is not None]
    return ToolFigures(
        requests=len(offered),
        requests_with_tool_calls=sum(1 for r in offered if r.tool_calls),
        tool_calls=sum(r.tool_calls or 0 for r in offered),
        ttft_tool_ms=describe(ttft),
    )


def schema_figures(ok: Sequence[RequestRecord], asked: bool) -> SchemaFigures | None:
    """None when the run asked for no response schema; a rate of None when no answer was checked."""
    if not asked:
        return None
    checked = [r for r in ok if r.schema_valid is not None]
    valid = sum(1 for r in checked if r.schema_valid)
    interval = wilson(valid, len(checked))
    return SchemaFigures(
        checked=len(checked),
        valid=valid,
        valid_rate=round(valid / len(checked), 6) if checked else None,
        ci_low=round(interval[0], 6) if interval else None,
        ci_high=round(interval[1], 6) if interval else None,
    )
