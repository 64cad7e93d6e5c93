"""tokenrace's own bench client drives the gateway end to end, as a user's application would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenrace.fakes.fake_server import FakeServerThread

from .helpers import CLIENT_KEY, ROOT, GatewayThread, config_text


@pytest.mark.slow
def test_bench_client_through_the_gateway(tmp_path: Path) -> None:
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 16, "models": ["m"]}) as fake:
        # Two instances (of one fake) in a pool: each record names the one that answered it.
        backends = {"a": {"url": fake.base_url}, "b": {"url": fake.base_url}}
        with GatewayThread(config_text(backends, [{"model": "m", "backends": [{"backend": ["a", "b"]}]}])) as gw:
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OPENAI_API_KEY": CLIENT_KEY}
            argv = [
                sys.executable,
                "-m",
                "tokenrace",
                "bench",
                "--url",
                gw.base_url,
                "--model",
                "m",
                "--requests",
                "30",
                "--concurrency",
                "4",
                "--no-cold",
                "--max-tokens",
                "16",
                "--json",
                "-o",
                str(tmp_path / "run"),
            ]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
            assert out.returncode == 0, out.stderr[-2000:]
            summary = json.loads((tmp_path / "run" / "summary.json").read_text())
            records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
            served = [r for r in records if r["phase"] == "measure"]
            assert len(served) == 30 and all(r["error_kind"] is None for r in served)
            assert all(r["output_tokens"] == 16 and r["output_tokens_source"] == "usage" for r in served)
            assert summary["error_rate"] == 0
            assert {r["served_by"] for r in served} == {"a", "b"}
            assert CLIENT_KEY not in out.stdout + out.stderr + (tmp_path / "run" / "manifest.json").read_text()
