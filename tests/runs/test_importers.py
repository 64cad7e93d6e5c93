"""vLLM bench serve and AIPerf results imported as runs, on sample files in their documented formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import in_process

from tokenrace.errors import UsageError
from tokenrace.report.compare import compare
from tokenrace.runs.history import Filters, History
from tokenrace.runs.importers import detect, import_file, import_to_dir
from tokenrace.runs.reader import load

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "imports"
VLLM = FIXTURES / "vllm_bench_serve.json"
AIPERF = FIXTURES / "aiperf" / "profile_export.jsonl"


def test_detects_both_formats(tmp_path: Path) -> None:
    assert detect(VLLM) == "vllm" and detect(AIPERF) == "aiperf"
    other = tmp_path / "x.json"
    other.write_text('{"hello": 1}')
    assert detect(other) is None
    with pytest.raises(UsageError, match="not a vLLM bench serve result"):
        import_file(other)


def test_vllm_figures_match_vllms_own() -> None:
    doc = json.loads(VLLM.read_text())
    run = import_file(VLLM)
    s = run.summary
    assert s.requests.model_dump() == {
        "total": 10,
        "succeeded": doc["completed"],
        "failed": doc["failed"],
        "cancelled": 0,
    }
    m = s.metrics
    # Same per-request values, same numpy statistics: the same numbers (ours are rounded to 4 decimals).
    for ours, theirs in (("ttft_ms", "ttft"), ("itl_chunk_ms", "itl"), ("e2e_ms", "e2el")):
        assert getattr(m, ours).mean == pytest.approx(doc[f"mean_{theirs}_ms"], abs=1e-3)
        assert getattr(m, ours).p50 == pytest.approx(doc[f"median_{theirs}_ms"], abs=1e-3)
    # vLLM's TPOT counts the time after the last chunk; ours ends at the last content chunk.
    assert m.tpot_ms.mean < doc["mean_tpot_ms"]
    assert s.throughput.output_tokens_per_s == pytest.approx(doc["output_throughput"], rel=1e-4)
    assert (
        run.manifest.model == doc["model_id"]
        and run.manifest.settings.load is not None
        and run.manifest.settings.load.concurrency == 4
    )
    assert run.manifest.tool == "vllm bench serve" and run.manifest.started_at == "2025-03-12T14:15:03"
    failed = [r for r in run.records() if r.error_kind]
    assert (
        len(failed) == 1
        and failed[0].error_kind == "imported"
        and "ServerDisconnectedError" in (failed[0].error_message or "")
    )
    first = run.measured_ok()[0]
    assert len(first.chunk_offsets_ms) == 32 and first.output_tokens_source == "vllm"


def test_older_vllm_results_without_start_times(tmp_path: Path) -> None:
    doc = json.loads(VLLM.read_text())
    del doc["start_times"], doc["latencies"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    s = import_file(old).summary
    assert s.throughput.window_s == doc["duration"] and s.imported.window == "duration"
    assert s.throughput.output_tokens_per_s == pytest.approx(doc["output_throughput"], rel=1e-4)
    assert s.metrics.e2e_ms.count == 9  # to the last chunk


def test_vllm_without_detail_is_refused(tmp_path: Path) -> None:
    doc = {
        k: v
        for k, v in json.loads(VLLM.read_text()).items()
        if k not in ("ttfts", "itls", "input_lens", "output_lens", "errors", "generated_texts", "start_times")
    }
    f = tmp_path / "short.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="--save-detailed"):
        import_file(f)


def test_aiperf_records_and_config() -> None:
    run = import_file(AIPERF)
    agg = json.loads((AIPERF.parent / "profile_export_aiperf.json").read_text())
    s = run.summary
    assert s.requests.model_dump() == {
        "total": 9,
        "succeeded": 8,
        "failed": 1,
        "cancelled": 0,
    }  # the warm-up request is kept but not measured
    assert [r.phase for r in run.records()].count("warmup") == 1
    assert s.metrics.ttft_ms.p50 == pytest.approx(agg["time_to_first_token"]["p50"], abs=1e-3)
    assert s.metrics.ttft_ms.max == pytest.approx(agg["time_to_first_token"]["max"], abs=1e-3)
    failed = next(r for r in run.records() if r.error_kind)
    assert failed.status == 500 and (failed.error_message or "").startswith("InternalServerError")
    settings = run.manifest.settings
    assert run.manifest.model == "Qwen/Qwen2.5-7B-Instruct" and settings.load and settings.load.concurrency == 2
    assert settings.request and settings.request.stream is True and run.manifest.command[0] == "aiperf"
    ok = run.measured_ok()[0]
    assert len(ok.chunk_offsets_ms) == 24 and ok.tpot_ms is not None


def test_aiperf_alone_and_in_seconds(tmp_path: Path) -> None:
    lines = [json.loads(x) for x in AIPERF.read_text().splitlines()]
    for x in lines:
        for metric in (x.get("metrics") or {}).values():
            if metric.get("unit") == "ms":
                v = metric["value"]
                metric.update(unit="s", value=[y / 1000 for y in v] if isinstance(v, list) else v / 1000)
    f = tmp_path / "profile_export.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = import_file(f)
    assert run.manifest.model is None  # no profile_export_aiperf.json beside it
    assert run.summary.metrics.ttft_ms.p50 == pytest.approx(import_file(AIPERF).summary.metrics.ttft_ms.p50, abs=1e-3)


@pytest.mark.slow
def test_imported_runs_go_into_the_history_and_compare_with_warnings(tmp_path: Path) -> None:
    d = import_to_dir(VLLM, tmp_path / "imports")
    assert sorted(p.name for p in d.iterdir()) == ["manifest.json", "records.jsonl", "summary.json"]
    saved, fresh = load(d).summary.model_dump(mode="json"), import_file(VLLM).summary.model_dump(mode="json")
    assert saved == fresh | {"imported": saved["imported"]}
    with History.open() as h:
        h.index(d)
        row = h.list(Filters(model="Llama-3.1"))[0]
    assert row.source == "vllm bench serve" and row.requests == 10
    report = compare([load(d), load(AIPERF)])
    text = " ".join(report.warnings)
    assert "model differs" in text and "tool version differs" in text and "concurrency differs: 4 (A) vs 2 (B)" in text


def test_cli_import_show_compare_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = in_process(capsys, "runs", "--import", str(AIPERF), "--import-to", str(tmp_path / "imp"))
    assert p.returncode == 0, p.stderr
    assert "converted" in p.stderr and "aiperf" in p.stdout
    p = in_process(capsys, "show", str(VLLM))
    assert p.returncode == 0 and "imported from" in p.stdout and "requests: 9/10 ok" in p.stdout
    p = in_process(capsys, "compare", str(VLLM), str(AIPERF), "--json")
    assert p.returncode == 0 and "WARNING: model differs" in p.stderr
    assert json.loads(p.stdout)["comparisons"][0]["rows"][0]["metric"] == "ttft_ms.p50"
    p = in_process(capsys, "report", str(VLLM), "-o", str(tmp_path / "v.html"))
    assert p.returncode == 0 and (tmp_path / "v.html").stat().st_size > 1_000_000


def test_vllm_spec_decode_figures_are_imported_in_our_units(tmp_path: Path) -> None:
    """vLLM bench's result: acceptance in per cent, per-position rates as fractions, length = 1 + accepted ÷ drafts
    (the values of vLLM's own test of its spec-decode result keys)."""
    doc = json.loads(VLLM.read_text())
    doc |= {
        "spec_decode_num_drafts": 3,
        "spec_decode_draft_tokens": 10,
        "spec_decode_accepted_tokens": 6,
        "spec_decode_acceptance_rate": 60.0,
        "spec_decode_acceptance_length": 3.0,
        "spec_decode_per_position_acceptance_rates": [1.0, 2 / 3],
    }
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(doc))
    spec = import_file(spec_file).summary.model_dump(mode="json")["speculative"]
    assert spec["acceptance_rate"] == pytest.approx(0.6) == spec["accepted_tokens"] / spec["draft_tokens"]
    assert spec["tokens_per_step"] == 3.0 and spec["mean_accepted_per_draft"] == 2.0 == 6 / 3
    assert spec["per_position"] == pytest.approx([1.0, 2 / 3])
    assert import_file(VLLM).summary.speculative is None
