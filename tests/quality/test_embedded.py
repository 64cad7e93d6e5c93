"""The offline demonstration: the embedded SmolLM2 Q4_1 against a Q2_K copy made here, kept small."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.conftest import require
from tests.integration.conftest import require_embedded

from tokenrace.cli import main
from tokenrace.quality.quantize import find_llama_quantize

pytestmark = pytest.mark.embedded


def test_compare_q4_1_with_a_local_q2_k_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_embedded()
    require("llama-quantize", find_llama_quantize(), "scripts/setup.sh builds it")
    out = tmp_path / "cmp"
    try:
        main(
            [
                "quality",
                "--compare",
                "--suite",
                "arithmetic",
                "--suite",
                "copy",
                "--samples",
                "3",
                "-o",
                str(out),
                "--json",
            ]
        )
    except SystemExit as exc:
        assert exc.code in (0, None)
    report = json.loads(capsys.readouterr().out)
    assert report["paired"]["n"] + report["excluded"]["errors_a"] + report["excluded"]["errors_b"] >= 6
    a, b = report["a"], report["b"]
    assert a["engine"]["model_file"]["quantization"] == "MOSTLY_Q4_1"
    assert b["engine"]["model_file"]["quantization"] == "MOSTLY_Q2_K"
    assert a["speed"]["tpot_ms_p50"] is not None and b["speed"]["tpot_ms_p50"] is not None
    assert report["verdict"] in ("B worse", "within noise", "B better")
    # The copy is cached in tokenrace's data directory (TOKENRACE_HOME in tests), not downloaded.
    copies = list((Path(os.environ["TOKENRACE_HOME"]) / "models").glob("*Q2_K*.gguf"))
    assert len(copies) == 1 and Path(b["engine"]["model_file"]["path"]) == copies[0]
    assert (out / "a" / "items.jsonl").is_file() and (out / "b" / "quality.json").is_file()


def test_bench_quality_samples_asks_the_measured_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_embedded()
    out = tmp_path / "profile"
    args = ["bench", "--requests", "3", "--max-tokens", "8", "--quality-samples", "1", "-o", str(out), "--json"]
    try:
        main(args)
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    quality = doc["quality"]
    # One item per built-in suite, asked of the engine the profile measured, before it stopped.
    assert quality["settings"]["items"] == 6 and quality["engine"]["model_file"]["quantization"] == "MOSTLY_Q4_1"
    manifest = json.loads((out / "run" / "manifest.json").read_text())
    assert quality["endpoint"] == manifest["endpoint"] and quality["model"] == manifest["model"]
    assert (out / "quality" / "quality.json").is_file() and (out / "profile.json").is_file()
    assert len((out / "quality" / "items.jsonl").read_text().splitlines()) == 6
