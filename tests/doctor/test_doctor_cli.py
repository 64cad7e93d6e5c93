from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenrace.cli import cli, main
from tokenrace.doctor.probe import RecordedProbe
from tokenrace.doctor.render import checks_table
from tokenrace.doctor.result import Status
from tokenrace.doctor.runner import run_doctor
from tokenrace.table import to_csv, to_html, to_markdown

from .scenarios import FIXTURES, SCENARIOS


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["doctor", *args], env={"COLUMNS": "120", **(env or {})})


@pytest.mark.parametrize("name", SCENARIOS)
def test_json_report_and_exit_code(name: str) -> None:
    result = invoke("--json", "--fixtures", str(FIXTURES / name))
    report = json.loads(result.output)
    assert result.exit_code == report["exit_code"]
    statuses = {check["status"] for check in report["checks"]}
    assert report["exit_code"] == (2 if "fail" in statuses else 1 if "warn" in statuses else 0)
    assert report["environment"]["tokenrace"]


def test_table_for_a_healthy_machine() -> None:
    result = invoke("--fixtures", str(FIXTURES / "healthy-h100"))
    assert result.exit_code == 0
    assert "The NVIDIA stack looks healthy: driver 550.54.15, CUDA 12.4, 1x NVIDIA H100 80GB HBM3" in result.output
    assert "Exit code 0" in result.output


def test_table_for_a_broken_machine_names_cause_and_fix() -> None:
    result = invoke("--fixtures", str(FIXTURES / "secure-boot-blocks-module"))
    assert result.exit_code == 2
    out = " ".join(result.output.split())  # undo rich's wrapping
    assert "FAIL secure-boot" in out and "Cause:" in out and "Fix:" in out
    assert "Machine Owner Key" in out
    assert "$ mokutil --sb-state" in out and "SecureBoot enabled" in out


def test_no_gpu_table() -> None:
    result = invoke("--fixtures", str(FIXTURES / "no-gpu"))
    assert result.exit_code == 1
    assert "No NVIDIA GPU found on this machine" in " ".join(result.output.split())


def test_fixtures_through_the_environment_variable() -> None:
    result = invoke("--json", env={"TOKENRACE_DOCTOR_FIXTURES": str(FIXTURES / "torch-cpu-build")})
    assert result.exit_code == 2
    assert json.loads(result.output)["headline"].startswith("1 problem(s) found")


def test_help_shows_recording_and_replaying() -> None:
    """--record and --fixtures are a pair a user runs (a scenario to attach to a bug report)."""
    result = invoke("--help")
    assert result.exit_code == 0
    for option in ("--record DIR", "--fixtures DIR", "--explain", "--model"):
        assert option in result.output


def test_explain_text_and_json() -> None:
    result = invoke("--explain", "RuntimeError: CUDA error: no kernel image is available for execution on the device")
    out = " ".join(result.output.split())
    assert result.exit_code == 0
    assert "No kernel image is available for the device" in out and "TORCH_CUDA_ARCH_LIST" in out
    as_json = json.loads(invoke("--json", "--explain", "0x80070002").output)
    assert as_json["matches"][0]["id"] == "win-installer-0x80070002"
    assert as_json["matches"][0]["source"] == "guides"


def test_explain_unknown_and_empty() -> None:
    unknown = invoke("--explain", "qwerty zzz")
    assert unknown.exit_code == 1 and "No known cause" in unknown.output

    with pytest.raises(SystemExit) as exit_info:
        main(["doctor", "--explain", " "])
    assert exit_info.value.code == 2


def test_model_local_path(tmp_path: Path) -> None:
    weights = tmp_path / "model.gguf"
    with open(weights, "wb") as fh:
        fh.truncate(20 * 2**30)  # sparse: 20 GiB on paper, nothing on disk
    report = json.loads(invoke("--json", "--model", str(weights), "--fixtures", str(FIXTURES / "healthy-h100")).output)
    by_id = {check["id"]: check for check in report["checks"]}
    assert by_id["model-disk"]["status"] == "ok" and "already on disk" in by_id["model-disk"]["summary"]
    assert by_id["model-ram"]["status"] == "ok"
    assert by_id["model-vram"]["status"] == "ok" and "fits one GPU" in by_id["model-vram"]["summary"]


def test_model_path_that_does_not_exist(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["doctor", "--model", "./no/such/model.gguf", "--fixtures", str(FIXTURES / "no-gpu")])
    assert exit_info.value.code == 2
    assert "error: --model: no such file or folder: ./no/such/model.gguf" in capsys.readouterr().err


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_renders_as_a_table(name: str) -> None:
    result = invoke("--fixtures", str(FIXTURES / name))
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"Exit code {result.exit_code}" in result.output


def test_explain_text_with_markup_characters() -> None:
    result = invoke("--explain", "[bold]odd[/] [[text]]")
    assert result.exit_code == 1 and "[bold]odd[/] [[text]]" in result.output


def test_the_checks_are_a_declared_table_every_renderer_draws() -> None:
    report = run_doctor(RecordedProbe(str(FIXTURES / "secure-boot-blocks-module")))
    table = checks_table(report)
    assert [c.label for c in table.columns] == ["", "check", "finding"]
    labels = {Status.OK: "ok", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip"}
    assert table.labels() == [labels[c.status] for c in report.checks]
    markdown, csv_text, html_text = to_markdown(table), to_csv(table), to_html(table)
    for check in report.checks:
        assert f"| {check.id} |" in markdown and f",{check.id}," in csv_text and check.id in html_text
    assert "| FAIL | secure-boot |" in markdown and "worse" in html_text  # the failing check, in its tone
