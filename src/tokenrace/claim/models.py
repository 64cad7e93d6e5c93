"""claim.json, as the claim package reads and writes it: the models live in `model/claim.py` (the
lowest layer, so that the history, the schema generator and the report read them too)."""

from __future__ import annotations

from pathlib import Path

from tokenrace.model.claim import (
    CLAIM_FILE,
    ClaimFile,
    ClaimQuality,
    Condition,
    ConditionCheck,
    ConditionFigures,
    DriftRatios,
    Expectation,
    Limits,
    PlannedStep,
    Verdict,
)
from tokenrace.runs.reader import read_model

__all__ = [
    "CLAIM_FILE",
    "ClaimFile",
    "ClaimQuality",
    "Condition",
    "ConditionCheck",
    "ConditionFigures",
    "DriftRatios",
    "Expectation",
    "Limits",
    "PlannedStep",
    "Verdict",
    "read_claim",
]


def read_claim(directory: Path) -> ClaimFile:
    """claim.json of a claim directory; a file that is not one is a one-line error."""
    return read_model(Path(directory) / CLAIM_FILE, ClaimFile)
