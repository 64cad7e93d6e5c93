"""Saved results, read back: a run, a sweep or a profile directory, or another tool's result file.

Everything downstream (show, compare, report) renders from these files and never re-measures.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from tokenrace.errors import UsageError
from tokenrace.model.files import MANIFEST, PROFILE, SUMMARY, SWEEP
from tokenrace.model.manifest import Manifest
from tokenrace.model.run import ProfileFile, StepRow, SweepFile
from tokenrace.model.summary import Summary
from tokenrace.runs.history import dir_kind, resolve_run
from tokenrace.runs.importers import import_file
from tokenrace.runs.rows import step_row
from tokenrace.runs.run import Run
from tokenrace.runs.store import read_json

M = TypeVar("M", bound=BaseModel)


def load(ref: str | Path) -> Run:
    """A directory (run, sweep, profile), a history id or name, or a vLLM/AIPerf result file."""
    path = resolve_run(ref)
    if path.is_file():
        return import_file(path)
    return load_dir(path)


def load_dir(path: Path) -> Run:
    kind = dir_kind(path)
    if kind == "run":
        return Run(path, "run", read_model(path / SUMMARY, Summary), read_model(path / MANIFEST, Manifest))
    if kind == "claim":
        raise UsageError(f"{path} holds a claim (claim.json), not a run: `tokenrace show {path}` prints it")
    if kind is None:
        raise UsageError(
            f"{path} is not a run, sweep or profile directory (no summary.json, sweep.json or profile.json)"
        )
    file: SweepFile | ProfileFile = (
        read_model(path / SWEEP, SweepFile) if kind == "sweep" else read_model(path / PROFILE, ProfileFile)
    )
    steps = [(row.step, load_dir(path / row.step)) for row in file.steps if dir_kind(path / row.step) == "run"]
    manifest = steps[0][1].manifest if steps else Manifest()
    if isinstance(file, ProfileFile):
        file.steps = _profile_rows(steps)
        # Older profile.json files do not name the model and endpoint: the first step's manifest does.
        file.model = file.model or manifest.model
        file.endpoint = file.endpoint or manifest.endpoint
    return Run(path, "sweep" if kind == "sweep" else "profile", file, manifest, steps)


def read_model(path: Path, model: type[M]) -> M:
    """A saved file through its model: files older than `schema_version` gain its fields as null."""
    try:
        return model.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: not a tokenrace {path.name} ({where}: {first['msg']})") from None


def _profile_rows(steps: list[tuple[str, Run]]) -> list[StepRow]:
    """A profile's step rows rebuilt from its run directories, in the sweep's row layout (older
    profile.json files lack some keys)."""
    rows = []
    for name, run in steps:
        row = step_row(name, run.directory, run.summary, run.manifest)
        rows.append(row.model_copy(update={"value": row.concurrency}))
    return rows
