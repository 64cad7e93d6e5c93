"""The recorded scenarios under tests/fixtures/doctor and a helper to run doctor on one."""

from __future__ import annotations

from pathlib import Path

from tokenrace.doctor.probe import RecordedProbe
from tokenrace.doctor.result import DoctorReport
from tokenrace.doctor.runner import run_doctor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def scenario_report(name: str | Path, model: str | None = None) -> DoctorReport:
    return run_doctor(RecordedProbe(FIXTURES / name), model=model)
