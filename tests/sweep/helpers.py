"""Small real runs against the fake server, for tests that need run directories."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tokenrace.bench.runner import Load
from tokenrace.bench.session import BenchResult, BenchSession, BenchSettings
from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint


def bench(base_url: str, out: Path, label: str | None = None, max_tokens: int = 16, **load: Any) -> BenchResult:
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=max_tokens),
        load=Load(**{"requests": 8, **load}),
        output=out,
        label=label,
    )
    return asyncio.run(BenchSession(settings, argv=["tokenrace", "bench", "test"]).run())
