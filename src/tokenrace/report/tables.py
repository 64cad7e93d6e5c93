"""Plain tables of a run summary, for the terminal (rich) and for Markdown."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

ROWS = (
    ("TTFT", "ttft_ms", "ms"),
    ("TTFT answer", "ttfa_ms", "ms"),
    ("TPOT", "tpot_ms", "ms"),
    ("ITL (chunk)", "itl_chunk_ms", "ms"),
    ("ITL (token)", "itl_token_ms", "ms"),
    ("E2E", "e2e_ms", "ms"),
    ("Schedule lag", "schedule_lag_ms", "ms"),
    ("Output tokens", "output_tokens", "tok"),
    ("Prompt tokens", "prompt_tokens", "tok"),
    ("Tokens/chunk", "tokens_per_chunk", "tok"),
)
COLS = ("count", "mean", "p50", "p90", "p95", "p99", "max")


def fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def summary_table(summary: dict[str, Any], title: str | None = None) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column("metric")
    t.add_column("unit")
    for c in COLS:
        t.add_column(c, justify="right")
    for label, key, unit in ROWS:
        m = summary["metrics"].get(key)
        if not m or not m.get("count"):
            continue
        t.add_row(label, unit, *(fmt(m.get(c), 0 if c == "count" else 1) for c in COLS))
    return t


def headline_lines(summary: dict[str, Any]) -> list[str]:
    req = summary["requests"]
    tp = summary["throughput"]
    lines = [
        f"requests: {req['succeeded']}/{req['total']} ok, error rate {fmt(_pct(summary['error_rate']))} %"
        + (f"  errors: {summary['errors_by_kind']}" if summary["errors_by_kind"] else ""),
        f"throughput: {fmt(tp['output_tokens_per_s'])} output tok/s, {fmt(tp['requests_per_s'], 2)} req/s"
        f" over {fmt(tp['window_s'], 2)} s; steady {fmt(tp['steady_output_tokens_per_s'])} tok/s",
    ]
    if summary.get("offered_rate") is not None:
        lines.append(f"rate: offered {fmt(summary['offered_rate'], 2)} req/s, achieved {fmt(summary['achieved_rate'], 2)} req/s")
    cold = summary.get("cold")
    if cold:
        lines.append(f"cold (first request): TTFT {fmt(cold['ttft_ms'])} ms, E2E {fmt(cold['e2e_ms'])} ms")
    src = summary.get("token_count_source") or {}
    lines.append(
        f"token counts from: output={src.get('output_tokens')}, prompt={src.get('prompt_tokens')}"
        + (" (approximate: counted chunks)" if src.get("approximate") else "")
    )
    if summary.get("goodput"):
        g = summary["goodput"]
        lines.append(f"goodput: {fmt(g['requests_per_s'], 2)} req/s, {fmt(_pct(g['fraction']))} % within SLO {g['slo']}")
    return lines


def _pct(x: float | None) -> float | None:
    return None if x is None else x * 100


def print_summary(summary: dict[str, Any], console: Console | None = None, title: str | None = None) -> None:
    console = console or Console()
    console.print(summary_table(summary, title))
    for line in headline_lines(summary):
        console.print(line, highlight=False)
