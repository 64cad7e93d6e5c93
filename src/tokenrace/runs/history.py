"""The history: an SQLite index of every run, sweep, profile and claim directory.

The files in a run directory are the record; this index only finds them again. It can be rebuilt
from the directories at any time (`tokenrace runs --import DIR`, `--reindex`), so losing it loses
nothing. Location: `$TOKENRACE_HOME/history.sqlite`, else the platform's user data directory.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
from pydantic import ValidationError

from tokenrace.errors import UsageError
from tokenrace.model.claim import CLAIM_FILE, ClaimFile
from tokenrace.model.files import MANIFEST, PROFILE, SUMMARY, SWEEP
from tokenrace.model.history import HistoryRow
from tokenrace.paths import home
from tokenrace.runs.store import read_json

SCHEMA_VERSION = 3  # 2: cache_hit_rate; 3: verdict (claims)
DB_NAME = "history.sqlite"

COLUMNS = tuple(HistoryRow.model_fields)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, path TEXT UNIQUE NOT NULL, kind TEXT NOT NULL, parent_id TEXT, name TEXT,
    label TEXT, endpoint TEXT, provider TEXT, model TEXT, source TEXT, version TEXT,
    started_at TEXT, finished_at TEXT, concurrency REAL, rate REAL, requests INTEGER, error_rate REAL,
    ttft_p50_ms REAL, ttft_p95_ms REAL, tpot_p50_ms REAL, e2e_p95_ms REAL, output_tokens_per_s REAL,
    cache_hit_rate REAL, steps INTEGER, knee TEXT, verdict TEXT, indexed_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_started ON runs (started_at);
CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_id);
PRAGMA user_version = {SCHEMA_VERSION};
"""


def history_path() -> Path:
    return home() / DB_NAME


def run_id(directory: Path) -> str:
    """Stable short id: a hash of the directory's absolute path."""
    return hashlib.sha1(str(Path(directory).resolve()).encode()).hexdigest()[:10]


def dir_kind(directory: Path) -> str | None:
    d = Path(directory)
    if (d / CLAIM_FILE).is_file():
        return "claim"
    if (d / SWEEP).is_file():
        return "sweep"
    if (d / PROFILE).is_file():
        return "profile"
    if (d / SUMMARY).is_file() and (d / MANIFEST).is_file():
        return "run"
    return None


@dataclass(frozen=True, slots=True)
class Filters:
    endpoint: str | None = None
    model: str | None = None
    label: str | None = None
    kind: str | None = None
    since: str | None = None  # ISO date or datetime, inclusive
    until: str | None = None  # ISO date (inclusive: the whole day) or datetime (exclusive)
    steps: bool = False  # include the steps of sweeps and profiles
    limit: int = 50


class History:
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    @classmethod
    def open(cls, path: Path | None = None) -> History:
        path = path or history_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=10)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"cannot open the run history at {path}: {exc}") from None
        conn.row_factory = sqlite3.Row
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            conn.close()
            raise UsageError(
                f"{path} was written by a newer tokenrace (schema {version}, this one reads {SCHEMA_VERSION})"
            )
        with conn:
            if version == 1:  # the index is a cache of the run directories: add the new column, reindex later
                conn.execute("ALTER TABLE runs ADD COLUMN cache_hit_rate REAL")
            if version in (1, 2):
                conn.execute("ALTER TABLE runs ADD COLUMN verdict TEXT")
            conn.executescript(_SCHEMA)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        return cls(conn, path)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # --- writing

    def index(self, directory: Path, parent_id: str | None = None) -> list[str]:
        """Index a run, sweep, profile or claim directory (with its steps, or a claim's runs and
        search). Returns the ids written."""
        d = Path(directory).resolve()
        kind = dir_kind(d)
        if kind is None:
            raise UsageError(f"{directory} is not a run, sweep or profile directory (no summary.json/sweep.json)")
        row = _row_for(d, kind, parent_id)
        ids = [row["id"]]
        with self.conn:
            self.conn.execute(
                f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                [row[c] for c in COLUMNS],
            )
        if kind != "run":
            inside = ("run", "sweep", "profile") if kind == "claim" else ("run",)
            for child in sorted(p for p in d.iterdir() if p.is_dir() and dir_kind(p) in inside):
                ids += self.index(child, row["id"])
        return ids

    def import_tree(self, root: Path) -> list[str]:
        """Index `root` and every run, sweep or profile directory below it."""
        root = Path(root)
        if not root.exists():
            raise UsageError(f"{root}: no such directory")
        if dir_kind(root) is not None:
            return self.index(root)
        ids: list[str] = []
        for d in _walk(root):
            ids += self.index(d)
        return ids

    def reindex(self) -> tuple[int, int]:
        """Re-read every indexed directory; drop those that are gone. Returns (updated, removed)."""
        paths = [
            (r["id"], r["path"], r["parent_id"]) for r in self.conn.execute("SELECT id, path, parent_id FROM runs")
        ]
        updated = removed = 0
        for rid, path, parent in paths:
            if dir_kind(Path(path)) is None:
                with self.conn:
                    self.conn.execute("DELETE FROM runs WHERE id = ?", (rid,))
                removed += 1
            elif parent is None:
                updated += len(self.index(Path(path)))
        return updated, removed

    # --- reading

    def list(self, f: Filters = Filters()) -> list[dict[str, Any]]:
        where, args = _where(f)
        sql = f"SELECT * FROM runs {where} ORDER BY started_at DESC, path LIMIT ?"
        return [dict(r) for r in self.conn.execute(sql, [*args, f.limit])]

    def get(self, rid: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT * FROM runs WHERE id = ?", (rid,)).fetchone()
        return dict(row) if row else None

    def resolve(self, ref: str) -> Path:
        """An id, a directory name (the newest with that name), or a unique id prefix, in that order:
        an exact match wins over a prefix (a directory named "b" is not the run whose id starts with b)."""
        rows = self.conn.execute("SELECT id, path FROM runs WHERE id = ?", (ref,)).fetchall()
        if not rows:
            rows = self.conn.execute(
                "SELECT id, path FROM runs WHERE name = ? ORDER BY started_at DESC LIMIT 1", (ref,)
            ).fetchall()
        if not rows:
            rows = self.conn.execute(
                "SELECT id, path FROM runs WHERE id LIKE ? ORDER BY started_at DESC", (ref + "%",)
            ).fetchall()
            if len(rows) > 1:
                raise UsageError(f"{ref!r} matches {len(rows)} runs; give more of the id")
        if not rows:
            raise UsageError(f"no run directory or history entry {ref!r} (see `tokenrace runs`)")
        return Path(rows[0]["path"])


def index_quietly(directory: Path) -> bool:
    """Index a run or sweep directory just written; True when it worked. The history is an index:
    failing to update it must never lose or stop a measurement (`tokenrace runs --import` fixes it)."""
    try:
        with History.open() as h:
            h.index(directory)
    except Exception:  # noqa: BLE001 - never fatal to the run that wrote the files
        return False
    return True


def resolve_run(ref: str | Path) -> Path:
    """A run/sweep directory given by path, or by id or name from the history."""
    p = Path(ref)
    if p.exists():
        return p
    if not history_path().exists():
        raise UsageError(f"{ref}: no such run directory (and no history yet)")
    with History.open() as h:
        return h.resolve(str(ref))


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, _ in os.walk(root):
        d = Path(dirpath)
        if dir_kind(d) is not None:
            dirnames[:] = []  # index() takes care of a sweep's steps
            yield d


def _where(f: Filters) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for col, value in (("endpoint", f.endpoint), ("model", f.model), ("label", f.label)):
        if value:
            clauses.append(f"{col} LIKE ?")
            args.append(f"%{value}%")
    if f.kind:
        clauses.append("kind = ?")
        args.append(f.kind)
    if f.since:
        clauses.append("started_at >= ?")
        args.append(_instant(f.since, "--since"))
    if f.until:
        clauses.append("started_at < ?")
        args.append(_until(f.until))
    if not f.steps:
        clauses.append("parent_id IS NULL")
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args


def _instant(text: str, flag: str) -> str:
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC).isoformat()
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag}: expected a date like 2025-01-31 or 2025-01-31T12:00, got {text!r}") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def _until(text: str) -> str:
    if len(text) == 10:  # a whole day, inclusive
        _instant(text, "--until")  # the same message for a bad date
        return _instant((date.fromisoformat(text) + timedelta(days=1)).isoformat(), "--until")
    return _instant(text, "--until")


# --- rows from the files --------------------------------------------------------------------------


def _row_for(d: Path, kind: str, parent_id: str | None) -> dict[str, Any]:
    base: dict[str, Any] = {c: None for c in COLUMNS}
    base.update(
        id=run_id(d),
        path=str(d),
        kind=kind,
        parent_id=parent_id,
        name=d.name,
        indexed_at=datetime.now(UTC).isoformat(),
    )
    if kind == "run":
        base.update(_run_fields(d))
    elif kind == "sweep":
        base.update(_sweep_fields(read_json(d / SWEEP)))
    elif kind == "claim":
        base.update(_claim_fields(d))
    else:
        base.update(_profile_fields(d, read_json(d / PROFILE)))
    return HistoryRow.model_validate(base).model_dump()


def _run_fields(d: Path) -> dict[str, Any]:
    m, s = read_json(d / MANIFEST), read_json(d / SUMMARY)
    load = (m.get("settings") or {}).get("load") or {}
    met = s.get("metrics") or {}

    def g(name: str, q: str) -> Any:
        return (met.get(name) or {}).get(q)

    return {
        "label": (m.get("settings") or {}).get("label"),
        "endpoint": m.get("endpoint"),
        "provider": m.get("provider"),
        "model": m.get("model"),
        "source": m.get("tool"),
        "version": m.get("version"),
        "started_at": _utc(m.get("started_at")),
        "finished_at": m.get("finished_at"),
        "concurrency": load.get("concurrency"),
        "rate": load.get("rate"),
        "requests": (s.get("requests") or {}).get("total"),
        "error_rate": s.get("error_rate"),
        "ttft_p50_ms": g("ttft_ms", "p50"),
        "ttft_p95_ms": g("ttft_ms", "p95"),
        "tpot_p50_ms": g("tpot_ms", "p50"),
        "e2e_p95_ms": g("e2e_ms", "p95"),
        "output_tokens_per_s": (s.get("throughput") or {}).get("output_tokens_per_s"),
        "cache_hit_rate": (s.get("cache") or {}).get("hit_rate"),
    }


def _sweep_fields(s: dict[str, Any]) -> dict[str, Any]:
    knee = s.get("knee")
    return {
        "label": s.get("label"),
        "endpoint": s.get("endpoint"),
        "provider": s.get("provider"),
        "model": s.get("model"),
        "source": s.get("tool"),
        "version": s.get("version"),
        "started_at": _utc(s.get("started_at")),
        "finished_at": s.get("finished_at"),
        "steps": len(s.get("steps") or []),
        "knee": orjson.dumps(knee).decode() if knee else None,
    }


def _claim_fields(d: Path) -> dict[str, str | int | float | None]:
    """A claim's row: its verdict, and the baseline's (one warm request at a time) error rate and TTFT."""
    try:
        claim = ClaimFile.model_validate(read_json(d / CLAIM_FILE))
    except ValidationError as exc:
        raise UsageError(f"{d / CLAIM_FILE}: not a tokenrace {CLAIM_FILE} ({exc.errors()[0]['msg']})") from None
    warm = next((c for c in claim.conditions if c.dimension == "warm" and c.held is not None), None)
    baseline = warm.figures if warm is not None else None
    return {
        "endpoint": claim.endpoint,
        "provider": claim.provider,
        "model": claim.model,
        "source": claim.tool,
        "version": claim.version,
        "started_at": _utc(claim.started_at),
        "finished_at": claim.finished_at,
        "requests": claim.requests_sent,
        "error_rate": baseline.get("error_rate") if baseline else None,
        "ttft_p50_ms": baseline.get("ttft_ms_p50") if baseline else None,
        "steps": sum(1 for c in claim.conditions if c.held is not None),
        "verdict": claim.verdict,
    }


def _profile_fields(d: Path, p: dict[str, Any]) -> dict[str, Any]:
    steps = p.get("steps") or []
    first = next((d / s["step"] for s in steps if (d / s["step"] / MANIFEST).is_file()), None)
    fields = _run_fields(first) if first else {}
    keep = ("label", "endpoint", "provider", "model", "source", "version", "started_at")
    return {**{k: fields.get(k) for k in keep}, "steps": len(steps)}


def _utc(text: str | None) -> str | None:
    """Normalise a timestamp for sorting and filtering; leave what cannot be read as it is."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return text
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
