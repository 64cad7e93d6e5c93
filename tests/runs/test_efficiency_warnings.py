"""The planner's caveats about its bound are coded run warnings, listed with the run's others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.model.summary import Summary


@pytest.mark.slow
def test_a_run_beating_its_bound_lists_the_coded_caveat_with_its_warnings(tmp_path: Path) -> None:
    # A 70B model in bf16 on a desktop CPU's memory: the bound is under 1 token/s per stream, and the
    # fake server streams a token every 2 ms, so the decode measurement beats it by far.
    with spawn_fake_server({"ttft_ms": 10, "itl_ms": 2, "output_tokens": 16}) as srv:
        p = subprocess.run(
            [sys.executable, "-m", "tokenrace", "bench", "--url", srv.url, "--requests", "4",
             "--hardware", "i9-13900K-DDR5-6400", "--model-config", "llama-3.1-70b", "--precision", "bf16",
             "-o", str(tmp_path / "r")],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
    assert p.returncode == 0, p.stderr
    s = Summary.model_validate_json((tmp_path / "r" / "summary.json").read_text())
    assert s.efficiency is not None and s.efficiency.decode_pct_of_bound is not None
    coded = [w for w in s.warnings if w.code == "efficiency.decode_beats_bound"]
    assert len(coded) == 1 and coded[0] in s.efficiency.warnings
    figures = coded[0].figures
    assert figures["pct_of_bound"] == s.efficiency.decode_pct_of_bound and s.efficiency.decode_pct_of_bound > 100
    assert figures["bound_tokens_per_s"] == s.efficiency.decode_tokens_per_s_bound
    assert coded[0].message.startswith("measurement beats the bound: decode ")
    # The terminal shows it once, among the run's warnings (the console may wrap the long line).
    assert p.stdout.count("warning: measurement beats the bound: decode ") == 1


def test_caveats_kept_as_sentences_read_as_efficiency_notes() -> None:
    old = {"schema_version": 2, "efficiency": {"hardware": "H100-SXM", "warnings": ["measurement beats the bound: x"]}}
    s = Summary.model_validate(old)
    assert s.efficiency is not None
    assert [(w.code, w.message) for w in s.efficiency.warnings] == [
        ("efficiency.note", "measurement beats the bound: x")
    ]
    assert s.warnings == s.efficiency.warnings
    # Written back and read again, the caveat is listed once.
    again = Summary.model_validate_json(s.model_dump_json())
    assert again.warnings == s.warnings
