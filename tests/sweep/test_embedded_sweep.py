"""A concurrency sweep against the embedded model (llama.cpp on this machine's CPU) finds the knee."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.conftest import require_embedded

pytestmark = pytest.mark.embedded


def test_embedded_sweep_finds_the_knee(tmp_path: Path, tokenrace_home: Path) -> None:
    require_embedded()
    out = tmp_path / "sweep"
    # On a few CPU cores throughput cannot keep doubling, and past llama-server's 8 parallel slots more
    # in flight only queue: by 32 at the latest it has stopped growing, however loaded the machine is.
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokenrace",
            "sweep",
            "--concurrencies",
            "1,2,4,8,16,32",
            "--max-tokens",
            "16",
            "--prompt",
            "Count from one to twenty in words.",
            "--temperature",
            "0",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TOKENRACE_HOME": str(tokenrace_home)},
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((out / "sweep.json").read_text())
    # Past its parallel slots (8) llama-server may also reset connections: errors stop the sweep too.
    assert s["stop_reason"] in ("saturated", "errors") and s["knee"] is not None, s["steps"]
    for row in s["steps"]:
        manifest = json.loads((out / row["step"] / "manifest.json").read_text())
        assert manifest["engine"]["model_file"]["path"].endswith(".gguf")
    assert all(row["requests"]["failed"] == 0 for row in s["steps"][: s["knee"]["index"] + 1])
    assert "◀ knee" in p.stdout
