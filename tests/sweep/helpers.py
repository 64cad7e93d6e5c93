"""Small real runs against the fake server, for tests that need run directories."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.load.runner import Load
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession
from tokenrace.runs.settings import BenchSettings


def bench(base_url: str, out: Path, label: str | None = None, max_tokens: int = 16, **load: Any) -> Run:
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=max_tokens),
        load=Load(**{"requests": 8, **load}),
        output=out,
        label=label,
    )
    return asyncio.run(BenchSession(settings, argv=["tokenrace", "bench", "test"]).run())
