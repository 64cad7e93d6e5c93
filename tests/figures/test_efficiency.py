from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.figures.efficiency import EfficiencySpec, efficiency_of
from tokenrace.figures.summary import summarize
from tokenrace.load.windows import Windows
from tokenrace.model.summary import Summary


def _summary(prompt: int, output: int, tpot_ms: float, ttft_ms: float, tok_s: float) -> Summary:
    s = summarize([], Windows())
    s.metrics.prompt_tokens.mean = prompt
    s.metrics.output_tokens.mean = output
    s.metrics.tpot_ms.p50 = tpot_ms
    s.metrics.ttft_ms.p50 = ttft_ms
    s.throughput.output_tokens_per_s = tok_s
    return s


def test_percent_of_bound_for_a_plausible_h100_run() -> None:
    # Llama 3.1 8B bf16 on one H100 SXM: ~16 GB read per step at 3.35 TB/s -> ~200 tok/s bound.
    eff = efficiency_of(
        _summary(512, 256, tpot_ms=7.0, ttft_ms=40.0, tok_s=140.0),
        EfficiencySpec("H100-SXM", "llama-3.1-8b", "bf16"),
        1,
    )
    assert eff is not None and not eff.error
    assert 150 < eff.decode_tokens_per_s_bound < 250
    assert 50 < eff.decode_pct_of_bound < 100 and eff.warnings == []


def test_the_nearest_published_point_is_named_beside_the_bound() -> None:
    # Llama 3.1 8B has published per-user speeds (Groq's, vLLM's on H200): one of them is named with
    # its source and its own share of its bound, which is at most 100 % for a non-speculative point.
    eff = efficiency_of(
        _summary(512, 256, tpot_ms=7.0, ttft_ms=40.0, tok_s=140.0),
        EfficiencySpec("H100-SXM", "llama-3.1-8b", "bf16"),
        1,
    )
    assert eff is not None and eff.nearest_published is not None
    assert "Llama" in eff.nearest_published and "[" in eff.nearest_published  # the label and [source]
    assert eff.nearest_published_pct_of_bound is not None and 0 < eff.nearest_published_pct_of_bound <= 100
    # A model no published row covers has no point, and says nothing rather than something wrong.
    other = efficiency_of(
        _summary(64, 64, tpot_ms=5.0, ttft_ms=20.0, tok_s=100.0), EfficiencySpec("H100-SXM", "qwen2.5-7b", "bf16"), 1
    )
    assert other is not None and not other.error and other.nearest_published is None


def test_a_measurement_beating_the_bound_warns() -> None:
    eff = efficiency_of(
        _summary(512, 256, tpot_ms=1.0, ttft_ms=40.0, tok_s=1000.0),
        EfficiencySpec("H100-SXM", "llama-3.1-8b", "bf16"),
        1,
    )
    assert eff is not None and eff.decode_pct_of_bound > 100
    assert any("beats the bound" in w.message for w in eff.warnings)


def test_unknown_names_give_an_error_entry_not_a_crash() -> None:
    eff = efficiency_of(_summary(10, 10, 5, 5, 5), EfficiencySpec("H100-SXM", "no-such-model-xyz"), 1)
    assert eff is not None and eff.error


@pytest.mark.slow
def test_bench_cli_reports_efficiency(tmp_path: Path) -> None:
    with spawn_fake_server({"ttft_ms": 10, "itl_ms": 2, "output_tokens": 16}) as srv:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "tokenrace",
                "bench",
                "--url",
                srv.url,
                "--requests",
                "5",
                "--hardware",
                "H100-SXM",
                "--model-config",
                "llama-3.1-8b",
                "--precision",
                "bf16",
                "-o",
                str(tmp_path / "r"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert p.returncode == 0, p.stderr
    eff = json.loads((tmp_path / "r" / "summary.json").read_text())["efficiency"]
    assert eff["hardware"] and eff["decode_pct_of_bound"] is not None
    assert "speed of light" in p.stdout


@pytest.mark.slow
def test_hardware_without_model_is_a_usage_error() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "tokenrace", "bench", "--url", "http://127.0.0.1:9", "--hardware", "H100-SXM"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "--model-config" in p.stderr
