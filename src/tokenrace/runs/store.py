"""The run directory: records.jsonl (streamed), summary.json and manifest.json.

Each record is appended and flushed when its request ends, so a crash or Ctrl-C loses nothing that
was measured. The event loop only serializes it; a writer thread writes and flushes it, so that a
busy disk (a `write()` held for milliseconds behind other processes' I/O) never stalls the loop that
stamps arrivals. `close()` waits until every record is on disk. JSON files are written to a temporary name and renamed, so they are never half-written.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.model.base import checked_for_writing
from tokenrace.model.files import MANIFEST, RECORDS, SUMMARY
from tokenrace.model.manifest import Manifest
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import Summary


def default_run_dir(label: str | None, root: str | Path = "runs") -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", label or "run").strip("-") or "run"
    return Path(root) / f"{stamp}-{safe}"


def write_model(path: Path, model: BaseModel, scrub: Callable[[bytes], bytes] | None = None) -> None:
    """A run file from its model: refused when it holds a key the model does not declare."""
    write_json(path, checked_for_writing(model).model_dump(mode="json"), scrub)


def write_json(path: Path, obj: Any, scrub: Callable[[bytes], bytes] | None = None) -> None:
    data = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(scrub(data) if scrub is not None else data)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


M = TypeVar("M", bound=BaseModel)


def read_model(path: Path, model: type[M]) -> M:
    """A saved file through its model: files older than `schema_version` gain its fields as null."""
    try:
        return model.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: not a tokenrace {path.name} ({where}: {first['msg']})") from None


class RunStore:
    """Owns one run directory while a run writes into it. `secrets`: values that must never reach a
    file (the API key, secret header and body values); any that slips into a line is written as ***."""

    def __init__(self, directory: Path, t0_ns: int, secrets: tuple[str, ...] = ()) -> None:
        self.dir = Path(directory)
        if (self.dir / RECORDS).exists():
            raise InvalidInput("output", f"{self.dir} already holds a run; choose another directory")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create {self.dir}: {exc.strerror}") from None
        self.t0_ns = t0_ns
        # As they appear inside a JSON string (escaped), longest first so no part of one is left.
        encoded = {orjson.dumps(s)[1:-1] for s in secrets if len(s) >= 4}
        self._secrets = sorted(encoded, key=len, reverse=True)
        self._records: IO[bytes] = open(self.dir / RECORDS, "ab")
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._error: OSError | None = None
        self._writer = threading.Thread(target=self._write_lines, name="tokenrace-records", daemon=True)
        self._writer.start()

    def append(self, rec: RequestRecord) -> None:
        if self._error is not None:
            raise UsageError(f"cannot write {self.dir / RECORDS}: {self._error.strerror}")
        rec.settle(self.t0_ns)
        self._lines.put(rec.model_dump_json().encode() + b"\n")
        # Written: the run holds every record until its summary, where the stamps serve the figures;
        # the offsets' copy of them (~3 KiB for 100 chunks) is not kept twice.
        rec.chunk_offsets_ms = []

    def _write_lines(self) -> None:
        while (line := self._lines.get()) is not None:
            try:
                self._records.write(self._scrub(line))  # scrubbed here, off the event loop
                self._records.flush()
            except OSError as exc:
                self._error = exc

    def write_manifest(self, manifest: Manifest) -> None:
        write_model(self.dir / MANIFEST, manifest, self._scrub)

    def write_summary(self, summary: Summary) -> None:
        write_model(self.dir / SUMMARY, summary, self._scrub)

    def _scrub(self, data: bytes) -> bytes:
        for secret in self._secrets:
            data = data.replace(secret, b"***")
        return data

    def close(self) -> None:
        if self._writer.is_alive():
            self._lines.put(None)
            self._writer.join()
        self._records.close()
        if self._error is not None:
            raise UsageError(f"cannot write {self.dir / RECORDS}: {self._error.strerror}")
