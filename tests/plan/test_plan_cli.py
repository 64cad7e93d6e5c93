"""`tokenrace plan` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenrace.cli import main

JSON_KEYS = ["weights_bytes", "kv_bytes_per_token", "total_bytes", "fits", "min_devices", "max_concurrency",
             "decode_tokens_per_s_bound", "aggregate_tokens_per_s_bound", "ttft_ms_bound"]  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(["plan", *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_table_over_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "gemma-4-31b")
    assert code == 0
    assert "bf16 61.4 GB · int8 30.7 GB · int4 15.3 GB" in out
    rtx = next(line for line in out.splitlines() if line.startswith("RTX-4090"))
    assert "4×" in rtx and "2×" in rtx and "1×" in rtx
    assert "Groq-LPU" in out and "H100-SXM" in out


def test_one_device_with_explain(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "--model",
        "llama-3.1-8b",
        "--hardware",
        "H100-SXM",
        "--context",
        "8192",
        "--concurrency",
        "16",
        "--explain",
    )
    assert code == 0
    assert "fits, comfortable" in out
    assert "32 global layers × 2 × 8 KV heads × 128 × 2 B = 131 kB" in out
    assert "per stream  ≤ 1 ÷" in out and "TTFT" in out


def test_json_keys_carry_units(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "--model",
        "llama-3.1-70b",
        "--hardware",
        "A100-SXM-80GB",
        "--concurrency",
        "16",
        "--context",
        "8192",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    for key in JSON_KEYS:
        assert key in data
    assert data["kv_bytes_per_token"] == 327_680
    # Two A100s: 70.6 GB of weights + 16 × 8192 × 327,680 B / 2 = 21.5 GB of KV each > 77.3 GB usable.
    assert data["min_devices"] == data["devices"] == 4
    assert data["aggregate_tokens_per_s_bound"] == pytest.approx(16 * data["decode_tokens_per_s_bound"])


def test_local_files(capsys: pytest.CaptureFixture[str], smollm2_gguf: Path, fixtures: Path) -> None:
    code, out, _ = run(capsys, "--model", str(smollm2_gguf), "--hardware", "RTX-4090", "--json")
    assert code == 0 and json.loads(out)["precision"] == "q4_1"
    code, out, _ = run(capsys, "--model", str(fixtures / "smollm2-135m-instruct"), "--hardware", "L4", "--json")
    assert code == 0 and json.loads(out)["params"] == 134_515_008


def test_unknown_model_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--model", "lama-3.1-8b", "--hardware", "H100-SXM")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "close matches: llama-3.1-8b" in err


def test_bad_numbers_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--model", "llama-3.1-8b", "--hardware", "H100-SXM", "--concurrency", "0")
    assert code == 2 and "--concurrency" in err


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--list")
    assert code == 0 and "gemma-4-31b" in out and "Groq-LPU" in out
