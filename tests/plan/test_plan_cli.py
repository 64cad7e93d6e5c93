"""`tokenrace plan` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenrace.cli import main
from tokenrace.plan import catalog_hardware, load_model, plan
from tokenrace.plan.tables import comparison_table, devices_table
from tokenrace.table import to_csv, to_html, to_markdown

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


def test_gemma_compares_gpus_and_lpus_with_energy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "gemma-4-31b")
    assert code == 0
    assert "devices needed, memory per device, the binding term and energy" in out
    groq = next(line for line in out.splitlines() if line.startswith("Groq-LPU") and "chip(s)/layer" in line)
    assert "communication" in groq and "300 W" in groq
    h100 = next(line for line in out.splitlines() if line.startswith("H100-SXM") and "one device" in line)
    assert "memory" in h100 and "700 W" in h100 and "0.0767" in h100
    tpu = next(line for line in out.splitlines() if line.startswith("TPU-v5e") and "tensor-parallel" in line)
    assert tpu.rstrip().endswith("—")  # no TDP published: no tokens per joule
    code, out, _ = run(capsys, "--model", "gemma-4-31b", "--json")
    rows = {(row["hardware"], row["precision"]): row for row in json.loads(out)["rows"]}
    lpu = rows[("Groq-LPU", "bf16")]
    assert lpu["decode_bound_by"] == "communication" and lpu["layout"]["kind"] == "sram"
    assert lpu["decode_tokens_per_joule_at_tdp"] == pytest.approx(
        lpu["decode_tokens_per_s_bound"] / (lpu["devices"] * 300)
    )


def test_one_plan_shows_layout_terms_energy_and_the_nearest_published_point(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "llama-3.3-70b", "--hardware", "H100-SXM", "--devices", "2", "--precision", "fp8",
                       "--context", "5250", "--link", "pcie5-x16")  # fmt: skip
    assert code == 0
    assert "layout    tensor-parallel over 2; inside a group: PCIe 5.0 x16" in out
    assert "communication 202 µs" in out
    assert "tok/J at the bound" in out
    assert "published NIM 1.8.0, Llama 3.3 70B FP8" in out and "% of its bound" in out
    code, out, _ = run(capsys, "--model", "llama-3.1-8b", "--hardware", "groq", "--json")
    data = json.loads(out)
    assert data["decode_bound_by"] in {"memory", "communication"}
    assert data["layout"]["kind"] == "sram" and data["decode_communication"]["trips"]
    assert data["published"]["hardware"] == "Groq-LPU" and data["published"]["pct_of_bound"] > 1
    assert data["tdp_w_per_device"] == 300


def test_link_needs_hardware_and_must_exist(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--model", "llama-3.1-8b", "--link", "nvlink4")
    assert code == 2 and "--link" in err
    code, _, err = run(
        capsys, "--model", "llama-3.1-8b", "--hardware", "RTX-4090", "--devices", "2", "--link", "nvlink4"
    )
    assert code == 2 and "--link: RTX-4090 has no 'nvlink4' link" in err


def test_list_shows_links_tdp_and_published_points(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--list")
    assert code == 0
    assert "link      groq-c2c" in out and "Linley" in out
    assert "tdp       H100-SXM" in out
    assert "published Groq, Llama 3.1 70B with speculative decoding" in out
    assert "published Cerebras Inference, Llama 3.1 8B: 1,800 tok/s per user on Cerebras WSE-3 (CS-3)" in out


def test_speeds_on_hardware_without_a_bound_are_shown_with_their_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """Cerebras's and SambaNova's published speeds: beside the model's bound, with no share of it."""
    code, out, _ = run(capsys, "--model", "llama-3.1-70b", "--hardware", "H100-SXM", "--precision", "bf16")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("published ")]
    assert "% of its bound" in lines[0]
    unbounded = lines[1:]
    assert [line.split(":")[0] for line in unbounded] == [
        "published Cerebras Inference, Llama 3.1 70B",
        "published SambaNova Cloud, Llama 3.1 70B",
    ]
    assert all("no bound, since" in line and "[primary: " in line and "% of" not in line for line in unbounded)
    code, out, _ = run(capsys, "--model", "llama-3.1-8b", "--hardware", "H100-SXM", "--json")
    rows = json.loads(out)["published_unbounded"]
    assert [(r["id"], r["tok_s"]) for r in rows] == [("cerebras-llama-3.1-8b", 1800), ("sambanova-llama-3.1-8b", 1042)]
    code, out, _ = run(capsys, "--model", "gemma-4-31b", "--hardware", "H100-SXM", "--json")
    assert json.loads(out)["published_unbounded"] == []


def test_the_catalog_tables_are_declared_for_every_renderer() -> None:
    model = load_model("gemma-4-31b")
    rows = [(hw, [plan("gemma-4-31b", hw.name, precision=p) for p in ("bf16", "int4")]) for hw in catalog_hardware()]
    devices = devices_table(rows)
    assert [c.label for c in devices.columns] == ["device", "memory", "bandwidth", "bf16", "int4"]
    assert devices.labels() == [hw.name for hw in catalog_hardware()]
    rtx = next(line for line in to_markdown(devices).splitlines() if line.startswith("| RTX-4090 |"))
    assert "×" in rtx
    one = comparison_table(model, [(hw, plans[0]) for hw, plans in rows])
    assert (
        one.title == f"{model.name} in bf16, one stream: devices needed, memory per device, the binding term and energy"
    )
    assert len(to_csv(one).splitlines()) == 1 + len(rows) and "<table>" in to_html(one)
