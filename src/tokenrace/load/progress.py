"""Live progress on stderr: done/total, live p50 TTFT, output tok/s, errors.

It is drawn from the event loop, at most once a second, when a request ends. Rich's own refresh
thread would redraw ten times a second, holding the interpreter lock for each draw (1.3 ms p50 on
a 2-vCPU VM, benchmarks/client_accuracy.py), which the event loop, stamping arrivals, waits out.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tokenrace.model.records import NS_PER_MS, RequestRecord

REDRAW_S = 1.0


class LiveProgress:
    def __init__(self, total: int | None, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.ttfts: list[float] = []
        self.tokens = 0
        self.errors = 0
        self.done = 0
        self.t_start = time.perf_counter()
        self._drawn_at = 0.0
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
            auto_refresh=False,
        )
        self._task = self._progress.add_task("bench", total=total, stats="")

    def __enter__(self) -> LiveProgress:
        if self.enabled:
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self._draw()
            self._progress.stop()

    def __call__(self, rec: RequestRecord) -> None:
        if rec.phase != "measure":
            return
        self.done += 1
        if rec.ok:
            if rec.first_token_ns is not None:
                self.ttfts.append((rec.first_token_ns - rec.start_ns) / NS_PER_MS)
            self.tokens += rec.output_tokens or 0
        else:
            self.errors += 1
        now = time.perf_counter()
        if self.enabled and now - self._drawn_at >= REDRAW_S:
            self._drawn_at = now
            self._draw()

    def stats(self) -> str:
        elapsed = time.perf_counter() - self.t_start
        p50 = f"{float(np.median(self.ttfts)):.1f}" if self.ttfts else "—"
        return f"TTFT p50 {p50} ms | {self.tokens / elapsed:.1f} tok/s | errors {self.errors}"

    def _draw(self) -> None:
        self._progress.update(self._task, completed=self.done, stats=self.stats())
        self._progress.refresh()
