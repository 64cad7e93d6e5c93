"""What a check reports and what a doctor run adds up to."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeAlias, TypedDict

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from tokenrace.model.environment import Environment, GpuInfo

# What a check found, by name: a version, a count, a flag, lines it matched (PCI devices, blacklist
# files, device nodes), or the GPUs nvidia-smi lists.
Fact: TypeAlias = str | int | float | bool | list[str] | list[GpuInfo] | None


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
    details: dict[str, Fact] = Field(default_factory=dict)


class DoctorReport(BaseModel):
    checks: list[CheckResult]
    headline: str
    environment: Environment = Field(default_factory=Environment)

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

    def to_json_dict(self) -> ReportJson:
        return {
            "exit_code": self.exit_code,
            "headline": self.headline,
            "counts": self.counts(),
            "checks": [check.model_dump(mode="json") for check in self.checks],
            "environment": self.environment.model_dump(mode="json"),
        }


class ReportJson(TypedDict):
    """`doctor --json`: the report with its exit code and counts; checks and environment as written."""

    exit_code: int
    headline: str
    counts: dict[str, int]
    checks: list[dict[str, JsonValue]]
    environment: dict[str, JsonValue]
