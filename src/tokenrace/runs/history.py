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

import orjson

from tokenrace.errors import UsageError
from tokenrace.model.claim import CLAIM_FILE, ClaimFile
from tokenrace.model.files import MANIFEST, PROFILE, SUMMARY, SWEEP
from tokenrace.model.history import HistoryRow
from tokenrace.model.manifest import Manifest
from tokenrace.model.run import ProfileFile, SweepFile
from tokenrace.model.settings import LoadSettings
from tokenrace.model.summary import Summary
from tokenrace.paths import home
from tokenrace.runs.store import read_model

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
        ids = [row.id]
        with self.conn:
            self.conn.execute(
                f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                [getattr(row, c) for c in COLUMNS],
            )
        if kind != "run":
            inside = ("run", "sweep", "profile") if kind == "claim" else ("run",)
            for child in sorted(p for p in d.iterdir() if p.is_dir() and dir_kind(p) in inside):
                ids += self.index(child, row.id)
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

    def list(self, f: Filters = Filters()) -> list[HistoryRow]:
        where, args = _where(f)
        sql = f"SELECT * FROM runs {where} ORDER BY started_at DESC, path LIMIT ?"
        return [HistoryRow.model_validate(dict(r)) for r in self.conn.execute(sql, [*args, f.limit])]

    def get(self, rid: str) -> HistoryRow | None:
        row = self.conn.execute("SELECT * FROM runs WHERE id = ?", (rid,)).fetchone()
        return HistoryRow.model_validate(dict(row)) if row else None

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


def _where(f: Filters) -> tuple[str, list[str]]:
    clauses: list[str] = []
    args: list[str] = []
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


def _row_for(d: Path, kind: str, parent_id: str | None) -> HistoryRow:
    who = HistoryRow.model_validate(
        {
            "id": run_id(d),
            "path": str(d),
            "kind": kind,
            "parent_id": parent_id,
            "name": d.name,
            "indexed_at": datetime.now(UTC).isoformat(),
        }
    )
    if kind == "run":
        row = _run_row(who, d)
    elif kind == "sweep":
        row = _sweep_row(who, read_model(d / SWEEP, SweepFile))
    elif kind == "claim":
        row = _claim_row(who, read_model(d / CLAIM_FILE, ClaimFile))
    else:
        row = _profile_row(who, d, read_model(d / PROFILE, ProfileFile))
    return HistoryRow.model_validate(row.model_dump())  # each value in its column's type


def _run_row(who: HistoryRow, d: Path) -> HistoryRow:
    m, s = read_model(d / MANIFEST, Manifest), read_model(d / SUMMARY, Summary)
    load = m.settings.load or LoadSettings()
    met = s.metrics
    return who.model_copy(
        update={
            "label": m.settings.label,
            **_origin(m),
            "concurrency": load.concurrency,
            "rate": load.rate,
            "requests": s.requests.total,
            "error_rate": s.error_rate,
            "ttft_p50_ms": met.ttft_ms.p50,
            "ttft_p95_ms": met.ttft_ms.p95,
            "tpot_p50_ms": met.tpot_ms.p50,
            "e2e_p95_ms": met.e2e_ms.p95,
            "output_tokens_per_s": s.throughput.output_tokens_per_s,
            "cache_hit_rate": s.cache.hit_rate if s.cache else None,
        }
    )


def _sweep_row(who: HistoryRow, s: SweepFile) -> HistoryRow:
    # The knee as sweep.json holds it (its keys as written).
    knee = orjson.dumps(s.knee.model_dump(mode="json", exclude_unset=True)).decode() if s.knee else None
    return who.model_copy(
        update={
            "label": s.label,
            **_origin(s),
            "steps": len(s.steps),
            "knee": knee,
        }
    )


def _claim_row(who: HistoryRow, claim: ClaimFile) -> HistoryRow:
    """A claim's row: its verdict, and the baseline's (one warm request at a time) error rate and TTFT."""
    warm = next((c for c in claim.conditions if c.dimension == "warm" and c.held is not None), None)
    baseline = warm.figures if warm is not None else None
    return who.model_copy(
        update={
            **_origin(claim),
            "requests": claim.requests_sent,
            "error_rate": baseline.get("error_rate") if baseline else None,
            "ttft_p50_ms": baseline.get("ttft_ms_p50") if baseline else None,
            "steps": sum(1 for c in claim.conditions if c.held is not None),
            "verdict": claim.verdict,
        }
    )


def _profile_row(who: HistoryRow, d: Path, p: ProfileFile) -> HistoryRow:
    first = next((d / s.step for s in p.steps if (d / s.step / MANIFEST).is_file()), None)
    run = _run_row(who, first) if first else who
    keep = ("label", "endpoint", "provider", "model", "source", "version", "started_at")
    return who.model_copy(update={**{k: getattr(run, k) for k in keep}, "steps": len(p.steps)})


def _origin(f: Manifest | SweepFile | ClaimFile) -> dict[str, str | None]:
    """Where and when a file's measurements were made, and by what."""
    return {
        "endpoint": f.endpoint,
        "provider": f.provider,
        "model": f.model,
        "source": f.tool,
        "version": f.version,
        "started_at": _utc(f.started_at),
        "finished_at": f.finished_at,
    }


def _utc(text: str | None) -> str | None:
    """Normalise a timestamp for sorting and filtering; leave what cannot be read as it is."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return text
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
