"""The tables of a run, a sweep and a profile, declared once (report/render.py renders them for the
terminal, HTML, Markdown and CSV), and the text lines printed under them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from tokenrace.client.request import POOLING_APIS
from tokenrace.figures.cost import CostSpec, cost_of
from tokenrace.model.run import ProfileFile, StepRow, SweepFile
from tokenrace.model.summary import Cache, Cost, PriceBasis, Summary, TurnStats
from tokenrace.report.render import BLANK, Cell, Column, Row, Table, fmt, num, pct, text, to_rich
from tokenrace.report.sla import sla_lines, sla_table
from tokenrace.runs.run import Run

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
    ("Cached tokens", "cached_tokens", "tok"),
    ("Tokens/chunk", "tokens_per_chunk", "tok"),
)
COLS = ("count", "mean", "p50", "p90", "p95", "p99", "max")


def summary_table(summary: Summary, title: str | None = None) -> Table:
    """Each latency and size statistic of the run, one row per metric it measured."""
    t = Table(title, [Column("metric", "left"), Column("unit", "left"), *(Column(c) for c in COLS)])
    for label, key, unit in ROWS:
        m = getattr(summary.metrics, key)
        if m.count:
            t.add(text(label), text(unit), *(num(getattr(m, c), 0 if c == "count" else 1) for c in COLS))
    return t


def headline_lines(summary: Summary) -> list[str]:
    req = summary.requests
    lines = [
        f"requests: {req.succeeded}/{req.total} ok, error rate {fmt(_pct(summary.error_rate))} %"
        + (f"  errors: {summary.errors_by_kind}" if summary.errors_by_kind else "")
        + (f"  cancelled by the client: {req.cancelled}" if req.cancelled else ""),
        _throughput_line(summary),
    ]
    if summary.offered_rate is not None:
        lines.append(
            f"rate: offered {fmt(summary.offered_rate, 2)} req/s, achieved {fmt(summary.achieved_rate, 2)} req/s"
        )
    cold = summary.cold
    if cold:
        lines.append(f"cold (first request): TTFT {fmt(cold.ttft_ms)} ms, E2E {fmt(cold.e2e_ms)} ms")
    src = summary.token_count_source
    lines.append(
        f"token counts from: output={src.output_tokens}, prompt={src.prompt_tokens}"
        + (" (approximate: counted chunks)" if src.approximate else "")
    )
    reasons = sorted(set((summary.not_measured or {}).values()))
    lines.extend(f"no TTFT, TPOT or ITL: {why}" for why in reasons)
    lines.extend(cache_lines(summary.cache))
    lines.extend(claim_lines(summary))
    lines.extend(turn_lines(summary.by_turn))
    lines.extend(structured_lines(summary))
    eff = summary.efficiency
    if eff is not None and not eff.error:
        lines.append(
            f"speed of light ({eff.devices} x {eff.hardware}, {eff.model} {eff.precision}): decode {fmt(eff.decode_pct_of_bound)} % "
            f"of {fmt(eff.decode_tokens_per_s_bound)} tok/s per stream, TTFT {fmt(eff.ttft_pct_of_bound)} % of the "
            f"{fmt(eff.ttft_ms_bound, 2)} ms minimum, aggregate {fmt(eff.aggregate_pct_of_bound)} %"
        )
    lines.extend(cost_lines(summary.cost))
    if summary.resources:
        from tokenrace.monitor.render import summary_lines  # noqa: PLC0415 - import cost: the monitor package only for a run with resource figures

        lines.extend(summary_lines(summary.resources))
    # The monitor's advice sits under the resource figures it reads; the rest close the list.
    resource = [w for w in summary.warnings if w.code.startswith("resources.")]
    lines.extend(f"warning: {w.message}" for w in resource)
    lines.extend(f"drift: {f}" for f in (summary.drift.findings if summary.drift else []))
    lines.extend(f"warning: {w.message}" for w in summary.warnings if w not in resource)
    g = summary.goodput
    if g is not None:
        lines.append(f"goodput: {fmt(g.requests_per_s, 2)} req/s, {fmt(_pct(g.fraction))} % within SLO {g.slo}")
    probes = summary.probes
    if probes is not None:
        t = probes.ttft_ms
        lines.append(
            f"probes ({fmt(probes.rate, 2)}/s beside the load, one output token): {probes.succeeded}/"
            f"{probes.requests} ok, TTFT p50 {fmt(t.p50)} ms, p95 {fmt(t.p95)} ms, max {fmt(t.max)} ms"
        )
    if summary.stopped is not None:
        lines.append(summary.stopped.message)
    return lines


def claim_lines(summary: Summary) -> list[str]:
    """What a speed figure rests on: the engine's speculative decoding, the content, the energy."""
    out = []
    spec = summary.speculative
    if spec is not None and spec.acceptance_rate is not None:
        steps = spec.tokens_per_step
        out.append(
            f"speculative decoding: {fmt(_pct(spec.acceptance_rate))} % of draft tokens accepted"
            + (f", {fmt(steps, 2)} tokens per step" if steps is not None else "")
            + f" ({spec.source})"
        )
    content = summary.content
    if content is not None:
        kinds = ", ".join(f"{k} {fmt(v.tpot_ms_p50, 2)} ms" for k, v in content.kinds.items())
        out.append(f"TPOT p50 by content: {kinds}; {content.verdict}")
    energy = summary.energy
    if energy is not None and energy.output_tokens_per_joule is not None:
        out.append(
            f"energy: {fmt(energy.joules)} J over {fmt(energy.window_s, 2)} s on {len(energy.gpus)} GPU(s), "
            f"{fmt(energy.output_tokens_per_joule, 2)} output tok/J, mean {fmt(energy.mean_power_w)} W "
            f"({energy.source}, {energy.method})"
        )
    return out


def _throughput_line(summary: Summary) -> str:
    tp, pooling = summary.throughput, summary.pooling
    if pooling is not None:
        # Embeddings and rerank generate nothing: their work is the inputs (documents) and their tokens.
        if pooling.api == "embeddings":
            items = f"{fmt(pooling.inputs_per_s, 2)} inputs/s"
        else:
            items = f"{fmt(pooling.documents_per_s, 2)} documents/s"
        dim = f"; vectors of {pooling.embedding_dim} dimensions" if pooling.embedding_dim else ""
        return (
            f"throughput: {items}, {fmt(pooling.input_tokens_per_s)} input tok/s, "
            f"{fmt(tp.requests_per_s, 2)} req/s over {fmt(tp.window_s, 2)} s{dim}"
        )
    return (
        f"throughput: {fmt(tp.output_tokens_per_s)} output tok/s, {fmt(tp.requests_per_s, 2)} req/s"
        f" over {fmt(tp.window_s, 2)} s; steady {fmt(tp.steady_output_tokens_per_s)} tok/s"
    )


def cache_lines(c: Cache | None) -> list[str]:
    """The prefix cache's share of the prompt, and whether prompts were busted; nothing when unknown."""
    if c is None:
        return []
    busted = (
        {True: "; prompts busted (a unique prefix per request)", False: "; prompts not busted"}.get(c.busted, "")
        if c.busted is not None
        else ""
    )
    if c.hit_rate is None:
        line = "prefix cache: the server did not report cached tokens" + busted
    else:
        line = (
            f"prefix cache: {fmt(_pct(c.hit_rate))} % of prompt tokens cached "
            f"({fmt(c.cached_tokens)} of {fmt(c.prompt_tokens)}, from {_source_text(c.source)}){busted}"
        )
    out = [line]
    server = c.server
    if server and server.hit_rate is not None:
        out.append(f"prefix cache (engine's own counters): {fmt(_pct(server.hit_rate))} % ({server.source})")
    return out


def structured_lines(summary: Summary) -> list[str]:
    """Images (TTFT by image count, and with minus without), tool calls and schema validity."""
    out: list[str] = []
    im = summary.images
    if im is not None:
        by = ", ".join(f"{g.images} image(s) {fmt(g.ttft_ms.p50)} ms ({g.requests} req)" for g in im.by_count)
        out.append(f"images: {im.images} in {im.requests_with_images} requests; TTFT p50 by image count: {by}")
        d = im.ttft_difference_ms
        if d is not None:
            out.append(
                f"images: TTFT p50 with − without = {fmt(d.difference, 2)} ms "
                f"(95 % CI {fmt(d.ci_low, 2)} to {fmt(d.ci_high, 2)})"
            )
    t = summary.tools
    if t is not None:
        out.append(
            f"tools: {t.tool_calls} calls in {t.requests_with_tool_calls}/{t.requests} requests, "
            f"time to the first tool delta p50 {fmt(t.ttft_tool_ms.p50)} ms"
        )
    so = summary.structured_output
    if so is not None:
        rate = "n/a (nothing checked)" if so.valid_rate is None else f"{fmt(_pct(so.valid_rate))} %"
        out.append(f"response schema: {rate} valid ({so.valid} of {so.checked} answers checked)")
    return out


def _source_text(source: Any) -> str:
    if isinstance(source, dict):
        return ", ".join(f"{k} x{v}" for k, v in source.items())
    return str(source) if source else "—"


def turn_lines(by_turn: list[TurnStats] | None) -> list[str]:
    if not by_turn:
        return []
    return [
        f"turn {t.turn}: {t.requests} requests, TTFT p50 {fmt(t.ttft_ms.p50)} ms, "
        f"prompt {fmt(t.prompt_tokens.mean, 0)} tok, cached {fmt(_pct(t.cache_hit_rate))} %"
        for t in by_turn
    ]


def _pct(x: float | None) -> float | None:
    return None if x is None else x * 100


def stdout_console() -> Console:
    """Rich's console on stdout; 120 columns when stdout is a file or a pipe (rich's default of 80
    would cut the per-step table)."""

    return Console() if sys.stdout.isatty() else Console(width=120)


def print_summary(summary: Summary, console: Console | None = None, title: str | None = None) -> None:
    console = console or stdout_console()
    console.print(to_rich(summary_table(summary, title)))
    for line in headline_lines(summary):
        console.print(line, highlight=False)


@dataclass(frozen=True, slots=True)
class StepColumn:
    """A step table's column: its header and the cell it shows for a step; an optional column is
    left out when no step has a value for it. One column = one line."""

    column: Column
    cell: Callable[[StepRow], Cell]
    optional: bool = False


def _col(label: str, cell: Callable[[StepRow], Cell], optional: bool = False) -> StepColumn:
    return StepColumn(Column(label), cell, optional)


PROFILE_COLUMNS = [
    _col("TTFT p50", lambda r: num(r.ttft_ms.p50)),
    _col("p95", lambda r: num(r.ttft_ms.p95)),
    _col("max", lambda r: num(r.ttft_ms.max)),
    _col("TPOT p50", lambda r: num(r.tpot_ms.p50)),
    _col("p95", lambda r: num(r.tpot_ms.p95)),
    _col("max", lambda r: num(r.tpot_ms.max)),
    _col("tok/s", lambda r: num(r.output_tokens_per_s)),
    _col("req/s", lambda r: num(r.requests_per_s, 2)),
    _col("cached", lambda r: pct(r.cache_hit_rate, 0)),
]
# Embeddings and rerank answer in one body: the latency instead of TTFT and TPOT, input tokens/s.
POOLING_COLUMNS = [
    _col("E2E p50", lambda r: num(r.e2e_ms.p50)),
    _col("p95", lambda r: num(r.e2e_ms.p95)),
    _col("max", lambda r: num(r.e2e_ms.max)),
    _col("in tok/s", lambda r: num(r.input_tokens_per_s)),
    _col("req/s", lambda r: num(r.requests_per_s, 2)),
]
SWEEP_COLUMNS = [
    _col("TTFT p50", lambda r: num(r.ttft_ms.p50)),
    _col("p95", lambda r: num(r.ttft_ms.p95)),
    _col("TPOT p50", lambda r: num(r.tpot_ms.p50, 2)),
    _col("p95", lambda r: num(r.tpot_ms.p95, 2)),
    # Beside TPOT, which speculative decoding moves: the engine's acceptance (accepted ÷ draft tokens).
    _col("accept", lambda r: pct(r.acceptance_rate, 0), optional=True),
    _col("E2E p95", lambda r: num(r.e2e_ms.p95)),
    _col("tok/s", lambda r: num(r.throughput_tokens_per_s)),
    _col("gain", lambda r: pct(r.gain, sign=True)),
    _col("err %", lambda r: pct(r.error_rate, suffix="")),
    # The prefix cache's share of the step's prompt tokens: a step served from the cache has a
    # lower TTFT for a reason other than load.
    _col("cached", lambda r: pct(r.cache_hit_rate, 0)),
    _col("tok/J", lambda r: num(r.output_tokens_per_joule, 2), optional=True),
    _col("$/M out tok", lambda r: num(_usd(r), 4), optional=True),
]
STEP = StepColumn(Column("step", "left"), lambda r: text(r.step))
OK = _col("ok", lambda r: text(f"{r.requests.succeeded}/{r.requests.total}"))


def _table(title: str, columns: list[StepColumn], steps: list[StepRow]) -> Table:
    shown = [c for c in columns if not c.optional or any(c.cell(row).value is not None for row in steps)]
    t = Table(title, [c.column for c in shown])
    for row in steps:
        t.add(*(c.cell(row) for c in shown), tone="best" if row.knee else "")
    return t


def profile_table(summary: ProfileFile) -> Table:
    """One row per step of the embedded profile (or any ramp): p50/p95/max of TTFT and TPOT; for
    embeddings and rerank steps, of the latency instead. The cold request's TTFT (E2E) first."""
    pooling = _pooling_steps(summary)
    columns = POOLING_COLUMNS if pooling else PROFILE_COLUMNS
    conc = _col("conc.", lambda r: num(r.concurrency))
    t = _table("steps", [STEP, conc, OK, *columns], summary.steps)
    cold = summary.cold
    if cold:
        ok = "1/1" if not cold.error_kind else "0/1"
        first = cold.e2e_ms if pooling else cold.ttft_ms
        t.rows.insert(0, Row([text("cold"), num(1), text(ok), num(first), *[BLANK] * (len(columns) - 1)]))
    return t


def _pooling_steps(summary: ProfileFile) -> bool:
    return any(row.api in POOLING_APIS for row in summary.steps)


SWEEP_LOAD = {
    "concurrency": "conc.",
    "rate": "rate",
    "goodput": "rate",
    "input_tokens": "prompt tok",
    "content": "conc.",
    "sla": "load",
}


def sweep_table(s: SweepFile) -> Table:
    """One row per step of a sweep: latency quantiles, throughput, its gain on the step before, errors,
    the prefix cache's share, what is known of speculation, energy and cost, and the knee,
    saturation or SLO mark."""
    kind = s.sweep or "concurrency"
    load = _col(SWEEP_LOAD[kind], lambda r: _load_cell(kind, r))
    mark = StepColumn(Column("", "left"), _mark)
    return _table(f"{kind} sweep: {fmt(s.model)} @ {fmt(s.endpoint)}", [STEP, load, OK, *SWEEP_COLUMNS, mark], s.steps)


def _usd(row: StepRow) -> float | None:
    return row.cost.usd_per_million_output_tokens if row.cost else None


def _load_cell(kind: str, row: StepRow) -> Cell:
    if kind in ("concurrency", "content") or (kind == "sla" and row.rate is None):
        return num(row.concurrency)
    if kind == "input_tokens":
        return num(row.prompt_tokens_mean, 0)
    return num(row.rate, 2)


def _mark(row: StepRow) -> Cell:
    if row.knee:
        return text("◀ knee", "best")
    if row.failing:
        return text("errors", "bad")
    if row.saturated:
        return text("saturated", "warn")
    if row.passed is not None:
        unclear = "" if row.certain in (True, None) else " (unclear)"
        return text("meets SLO" + unclear, "good") if row.passed else text("misses SLO" + unclear, "bad")
    return BLANK


def sweep_lines(s: SweepFile) -> list[str]:
    lines = []
    knee = s.knee
    if knee:
        what = f"concurrency {knee.concurrency}" if s.sweep == "concurrency" else f"rate {fmt(knee.rate, 2)} req/s"
        usd = knee.usd_per_million_output_tokens
        lines.append(
            f"knee: {knee.step} ({what}): {fmt(knee.throughput_tokens_per_s)} output tok/s, "
            f"E2E p95 {fmt(knee.e2e_p95_ms)} ms ({knee.reason})"
            + (f", ${fmt(usd, 4)} per million output tokens" if usd is not None else "")
        )
    elif s.sweep in ("concurrency", "rate") and s.steps:
        lines.append(
            "knee: not reached (throughput still grew at the last step)"
            if s.stop_reason == "completed"
            else f"knee: none ({s.stop_reason} at the first step)"
        )
    lines.append(f"stopped: {fmt(s.stop_reason or 'no reason recorded (an older sweep.json)')}")
    if s.content is not None:
        lines.append(f"content: {s.content.verdict}")
    if s.prefill:
        p = s.prefill
        lines.append(
            f"prefill fit: TTFT = {fmt(p.intercept_ms)} ms + {fmt(p.slope_ms_per_token, 4)} ms/token; "
            f"{fmt(p.prefill_tokens_per_s)} tok/s prefill, R² {fmt(p.r2, 3)} ({p.points} points)"
        )
    g = s.goodput_search
    if g:
        lines.append(
            f"max goodput rate: {fmt(g.best_rate, 3)} req/s meeting {g.slo} for "
            f"≥{fmt((g.attainment or 0) * 100, 0)} % of requests; bracket [{fmt(g.lower, 3)}, "
            f"{fmt(g.upper, 3)}], {g.probes} probes ({g.reason})"
        )
    return lines


def steps_table(s: SweepFile | ProfileFile) -> Table:
    """The step table of a sweep or of an embedded profile, as the terminal and the HTML show it."""
    return sweep_table(s) if isinstance(s, SweepFile) else profile_table(s)


def run_table(run: Run, cost: CostSpec | None = None) -> Table:
    """The main table of a saved run: its summary, its sweep's steps (priced) or its profile's steps."""
    if run.kind == "run":
        m = run.manifest
        return summary_table(run.summary, f"{fmt(m.model)} @ {fmt(m.endpoint)}")
    return steps_table(with_costs(run, cost))


def with_costs(run: Run, cost: CostSpec | None) -> SweepFile | ProfileFile:
    """The run's sweep (or profile) file with each step's cost filled in from its summary."""
    data = run.sweep.model_copy(deep=True)
    steps = dict(run.steps)
    for row in data.steps:
        if row.step in steps:
            step = steps[row.step]
            row.cost = cost_of(step.summary, step.manifest.provider, step.manifest.model, cost)
    return data


def wide_console() -> Console:
    """A terminal's own width; 160 columns when printing to a file or pipe (rich would use 80)."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def print_sweep(s: SweepFile, console: Console | None = None) -> None:
    console = console or wide_console()
    console.print(to_rich(sweep_table(s)))
    if s.sla:
        console.print(sla_table(s))
    for line in sweep_lines(s) + sla_lines(s):
        console.print(line, highlight=False)


def _model_name(summary: ProfileFile, model_file: dict[str, Any]) -> str:
    path = model_file.get("path")
    return Path(path).name if path else fmt(summary.model)


def print_profile(summary: ProfileFile, console: Console | None = None) -> None:
    console = console or stdout_console()
    eng = summary.engine or {}
    mf = eng.get("model_file") or {}
    size = mf.get("file_size_bytes")
    console.print(
        f"[bold]{fmt(eng.get('engine'))}[/bold] {eng.get('version') or ''} | model {_model_name(summary, mf)} "
        f"({mf.get('quantization') or 'quantization unknown'}, {fmt(None if size is None else size / 1e6)} MB) "
        f"@ {fmt(summary.endpoint)} | threads {fmt(eng.get('threads'))}, "
        f"slots {fmt(eng.get('parallel_slots'))} | times in ms",
        highlight=False,
    )
    console.print(to_rich(profile_table(summary)))
    bust = summary.cache_bust
    if bust is not None and not _pooling_steps(summary):
        console.print(
            "prompts: built-in, busted (a unique prefix per request, so the prefix cache cannot serve them and "
            "the steps compare prefill with prefill; --no-cache-bust allows hits)"
            if bust
            else "prompts: built-in, not busted: the prefix cache serves repeated prompts (see the cached column)",
            highlight=False,
        )
    cold, warm = summary.cold, summary.warm.ttft_ms if summary.warm else None
    if cold is not None and cold.ttft_ms is not None and warm is not None and warm.p50 is not None:
        console.print(
            f"cold vs warm TTFT: {fmt(cold.ttft_ms)} ms first request, {fmt(warm.p50)} ms warm p50 (concurrency 1)",
            highlight=False,
        )
    for row in summary.steps:
        eff = row.efficiency
        if eff is not None and not eff.error:
            console.print(
                f"{row.step}: decode {fmt(eff.decode_pct_of_bound)} % of the {fmt(eff.decode_tokens_per_s_bound)} tok/s/stream bound "
                f"({eff.hardware}, {fmt((eff.hardware_bandwidth_bytes_per_s or 0) / 1e9)} GB/s), aggregate {fmt(eff.aggregate_pct_of_bound)} %",
                highlight=False,
            )
            for w in eff.warnings:
                console.print(f"[yellow]warning[/yellow]: {w.message}")
        svc = row.server_vs_client
        if svc:
            console.print(
                f"{row.step}: engine clock vs client: TTFT {fmt(svc.ttft_ms.server_p50)} vs {fmt(svc.ttft_ms.client_p50)} ms, "
                f"TPOT {fmt(svc.tpot_ms.server_p50, 2)} vs {fmt(svc.tpot_ms.client_p50, 2)} ms (p50)",
                highlight=False,
            )


def cost_lines(c: Cost | None) -> list[str]:
    if c is None:
        return []
    per_m, per_k = fmt(c.usd_per_million_output_tokens, 4), fmt(c.usd_per_1k_requests, 4)
    if c.basis == "gpu" and c.gpu is not None:
        g = c.gpu
        basis = f"{g.gpus} GPU(s) at ${fmt(g.usd_per_gpu_hour, 2)}/GPU-hour at the measured throughput"
    else:
        p = c.price or PriceBasis()
        basis = f"${fmt(p.input_per_m, 3)} in / ${fmt(p.output_per_m, 3)} out per M tokens ({p.source}" + (
            f", {p.date})" if p.date else ")"
        )
    return [f"cost: ${per_m} per million output tokens, ${per_k} per 1k requests; {basis}"]
