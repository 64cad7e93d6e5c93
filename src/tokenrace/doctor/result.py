"""What a check reports and what a doctor run adds up to."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Evidence(BaseModel):
    model_config = ConfigDict(frozen=True)

    cmd: str
    excerpt: str
    returncode: int | None = None


class CheckResult(BaseModel):
    id: str
    title: str
    status: Status
    summary: str
    evidence: list[Evidence] = Field(default_factory=list)
    cause: str | None = None
    fix: str | None = None
    kb: str | None = Field(default=None, description="id of the knowledge entry the cause and fix come from")
    details: dict[str, Any] = Field(default_factory=dict)


class DoctorReport(BaseModel):
    checks: list[CheckResult]
    headline: str
    environment: dict[str, Any] = Field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 all ok (skips allowed), 1 some warning, 2 some failure."""
        statuses = {check.status for check in self.checks}
        if Status.FAIL in statuses:
            return 2
        return 1 if Status.WARN in statuses else 0

    def counts(self) -> dict[str, int]:
        return {status.value: sum(c.status is status for c in self.checks) for status in Status}

    def get(self, check_id: str) -> CheckResult:
        for check in self.checks:
            if check.id == check_id:
                return check
        raise KeyError(check_id)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "headline": self.headline,
            "counts": self.counts(),
            "checks": [check.model_dump(mode="json") for check in self.checks],
            "environment": self.environment,
        }
