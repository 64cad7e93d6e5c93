"""The run store writes no secret value it was given, whatever field it slips into."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import fake_key

from tokenrace.model.manifest import Manifest
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import Summary
from tokenrace.runs.store import RunStore

SECRET = fake_key("", "store")  # not key-shaped: only the exact value can hide it
QUOTED = 'pa"ss\\word'  # a value JSON has to escape


def test_a_secret_in_any_field_is_written_as_stars(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "r", 0, (SECRET, QUOTED))
    rec = RequestRecord(seq=0, error_kind="http_401", error_message=f"bad key {SECRET} and {QUOTED}", status=401)
    store.append(rec)
    store.write_manifest(
        Manifest.model_validate({"schema_version": 1, "endpoint": f"http://h/v1?key={SECRET}", "tokenizer": QUOTED})
    )
    store.write_summary(Summary.model_validate({"warnings": [f"the server echoed {SECRET}"]}))
    store.close()
    with pytest.raises(ValueError, match="does not declare: labl"):  # written files hold declared keys only
        store.write_manifest(Manifest.model_validate({"labl": "a misspelt key"}))
    written = b"".join(p.read_bytes() for p in (tmp_path / "r").iterdir())
    assert SECRET.encode() not in written and b'pa\\"ss\\\\word' not in written
    assert written.count(b"***") >= 5
    # What is not secret is untouched, and the files still read back through their models.
    manifest = Manifest.model_validate_json((tmp_path / "r" / "manifest.json").read_bytes())
    assert manifest.endpoint == "http://h/v1?key=***" and manifest.tokenizer == "***"


def test_the_manifest_model_hides_secret_headers_and_body_fields() -> None:
    settings = {
        "request": {
            "extra_headers": {"X-Api-Key": "k1", "Authorization": "Bearer k2", "X-Team": "blue"},
            "extra_body": {"max_tokens": 8, "nested": {"client_secret": "k3", "top_k": 5}},
        }
    }
    request = Manifest.model_validate({"settings": settings}).settings.request
    assert request is not None
    assert request.extra_headers == {"X-Api-Key": "***", "Authorization": "***", "X-Team": "blue"}
    assert request.extra_body == {"max_tokens": 8, "nested": {"client_secret": "***", "top_k": 5}}
