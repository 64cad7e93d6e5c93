"""The saved files' typed models: schemas in docs/schema/ are current, real runs validate against
them, and files written before `schema_version` are still read."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from tests.sweep.helpers import bench

from tokenrace.errors import UsageError
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.model.files import SCHEMA_VERSION
from tokenrace.model.records import RequestRecord
from tokenrace.model.schema import schema_name, schemas
from tokenrace.model.summary import Summary
from tokenrace.report.tables import headline_lines
from tokenrace.runs.reader import load_dir

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "docs" / "schema"


def validator(file_name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMA_DIR / schema_name(file_name)).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_committed_schemas_are_current() -> None:
    fresh = schemas()
    on_disk = {p.name: p.read_text() for p in SCHEMA_DIR.glob("*.schema.json")}
    stale = sorted(n for n in fresh if on_disk.get(n) != fresh[n])
    extra = sorted(set(on_disk) - set(fresh))
    assert not stale and not extra, (
        f"docs/schema is stale ({stale or extra}): run `python -m tokenrace.model.schema` and commit the result"
    )


LINE_KEYS = (
    "schema_version seq phase worker session_id turn intended_start_ms start_ms schedule_lag_ms client_prep_ms "
    "connect_ms new_connection retried_stale_connection ttft_ms ttfa_ms e2e_ms tpot_ms ttft_from_intended_ms "
    "e2e_from_intended_ms chunk_offsets_ms chunk_tokens reasoning_chunks prompt_tokens prompt_tokens_source "
    "cached_tokens cached_tokens_source output_tokens output_tokens_source streamed_tokens streamed_tokens_source "
    "output_chars max_tokens content finish_reason finishes status error_kind error_message retry_after_s response_id served_by server_timing images image_bytes "
    "image_pixels tool_calls ttft_tool_ms schema_valid inputs documents embedding_dim"
).split()


def test_a_settled_record_is_the_line_with_its_figures_and_no_stamps() -> None:
    """records.jsonl's keys, in their order; the client's ns stamps stay in memory."""
    rec = RequestRecord(
        seq=3, start_ns=1_010_000, first_token_ns=1_020_000, end_ns=1_040_000, chunk_ns=[1_020_000, 1_030_000]
    )
    rec.output_tokens, rec.text = 2, "abc"
    rec.settle(1_000_000)
    line = orjson.loads(rec.model_dump_json())
    assert list(line) == LINE_KEYS
    assert line["schema_version"] == SCHEMA_VERSION
    assert (line["start_ms"], line["ttft_ms"], line["e2e_ms"], line["tpot_ms"]) == (0.01, 0.01, 0.03, 0.01)
    assert line["chunk_offsets_ms"] == [0.01, 0.02] and line["output_chars"] == 3


def test_a_record_line_read_into_its_model_is_written_again_byte_for_byte() -> None:
    """An imported run's records.jsonl is written from the same model: the same keys, in the same order."""
    rec = RequestRecord(seq=3, start_ns=10, first_token_ns=20, end_ns=40, chunk_ns=[20, 30], output_tokens=2)
    rec.cached_tokens, rec.cached_tokens_source = 1, "usage"
    rec.server_timing = {"prompt_n": 3, "prompt_ms": 1.25, "predicted_per_second": None}  # as the server sent it
    rec.settle(0)
    line = rec.model_dump_json().encode()
    assert RequestRecord.model_validate_json(line).model_dump_json().encode() == line
    old = (ROOT / "tests" / "fixtures" / "runs" / "schema-v1" / "records.jsonl").read_bytes().splitlines()[0]
    assert RequestRecord.model_validate_json(old).seq is not None  # an older file still loads


def test_records_skip_a_line_that_is_not_a_record(tmp_path: Path) -> None:
    """Run.records(): a line cut by a crash or not a record at all is left out, the others are read."""
    d = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "schema-v1", d)
    whole = (d / "records.jsonl").read_bytes()
    (d / "records.jsonl").write_bytes(whole + b'{"not": "a record"}\n' + whole.splitlines()[0][:40])
    records = load_dir(d).records()
    assert [r.seq for r in records] == [
        r.seq for r in load_dir(ROOT / "tests" / "fixtures" / "runs" / "schema-v1").records()
    ]
    assert len(records) == len(whole.splitlines()) and all(isinstance(r, RequestRecord) for r in records)


def _errors(v: jsonschema.protocols.Validator, doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]


@pytest.mark.slow
def test_a_real_run_and_sweep_validate_against_docs_schema(tmp_path: Path, tokenrace_home: Path) -> None:
    with FakeServerThread({"ttft_ms": 2, "itl_ms": 1, "output_tokens": 6}) as srv:
        run = bench(srv.base_url, tmp_path / "run", requests=6, concurrency=2)
        sweep_dir = tmp_path / "sweep"
        p = subprocess.run(
            [sys.executable, "-m", "tokenrace", "sweep", "--url", srv.base_url, "--concurrencies", "1,2", "--no-stop",
             "--requests", "4", "--max-tokens", "6", "-o", str(sweep_dir)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
    for d in (run.directory, *sorted(x for x in sweep_dir.iterdir() if x.is_dir())):
        for name in ("summary.json", "manifest.json"):
            doc = json.loads((d / name).read_text())
            assert doc["schema_version"] == SCHEMA_VERSION
            assert _errors(validator(name), doc) == [], (d, name)
        lines = [json.loads(x) for x in (d / "records.jsonl").read_text().splitlines()]
        assert lines and all(line["schema_version"] == SCHEMA_VERSION for line in lines)
        v = validator("records.jsonl")
        assert [e for line in lines for e in _errors(v, line)] == []
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    assert sweep["schema_version"] == SCHEMA_VERSION and len(sweep["steps"]) == 2
    assert _errors(validator("sweep.json"), sweep) == []


def test_a_schema_catches_a_wrong_type() -> None:
    doc = Summary().model_dump(mode="json")
    doc["error_rate"] = "high"
    assert _errors(validator("summary.json"), doc)


def test_files_without_schema_version_are_still_read(tmp_path: Path) -> None:
    """A run directory as older versions wrote it: no schema_version, no cache or warnings keys."""
    with FakeServerThread({"ttft_ms": 2, "itl_ms": 1, "output_tokens": 4}) as srv:
        run = bench(srv.base_url, tmp_path / "old", requests=3)
    for name, drop in (
        ("summary.json", ("schema_version", "cache", "by_turn", "warnings")),
        ("manifest.json", ("schema_version",)),
    ):
        path = run.directory / name
        doc = json.loads(path.read_text())
        for key in drop:
            doc.pop(key)
        doc["metrics"].pop("cached_tokens", None) if name == "summary.json" else None
        path.write_text(json.dumps(doc))
    data = load_dir(run.directory)
    assert data.summary.schema_version == 0 and data.manifest.schema_version == 0
    assert data.summary.cache is None and data.summary.warnings == []
    assert data.summary.metrics.cached_tokens.count == 0  # no data: count 0, stats null
    assert data.summary.metrics.cached_tokens.p50 is None
    assert data.summary.requests.succeeded == 3


def test_a_schema_1_run_reads_its_free_text_warnings_as_typed_ones() -> None:
    """Version 1 kept warnings as sentences in `warnings` and `resource_warnings`; they load as one typed list."""
    data = load_dir(ROOT / "tests" / "fixtures" / "runs" / "schema-v1")
    s = data.summary
    assert s.schema_version == 1 and SCHEMA_VERSION > 1
    assert [(w.code, w.message[:22], w.figures) for w in s.warnings] == [
        ("resources.note", "GPU utilisation averag", {}),
        ("run.note", "prefix cache: 45.0 % o", {}),
    ]
    assert "resource_warnings" not in s.model_dump(mode="json")
    assert s.requests.succeeded == 3 and s.metrics.ttft_ms.p50 is not None
    lines = headline_lines(s)
    assert sum(1 for x in lines if x.startswith("warning: ")) == 2
    # A summary written now validates against the committed schema; the old one read back does too.
    assert not _errors(validator("summary.json"), s.model_dump(mode="json"))


def test_a_file_that_is_not_a_summary_gets_one_line(tmp_path: Path) -> None:
    with FakeServerThread({"ttft_ms": 2, "itl_ms": 1, "output_tokens": 4}) as srv:
        run = bench(srv.base_url, tmp_path / "bad", requests=2)
    (run.directory / "summary.json").write_text(json.dumps({"requests": "many"}))
    with pytest.raises(UsageError, match=r"summary.json: not a tokenrace summary.json \(requests"):
        load_dir(run.directory)
