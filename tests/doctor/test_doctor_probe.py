from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from tests.conftest import in_process

from tokenrace.doctor.commands import COMMANDS, command_key, display
from tokenrace.doctor.probe import RecordedProbe, RecordingProbe, SystemProbe
from tokenrace.doctor.runner import run_doctor

from .scenarios import FIXTURES


def test_system_probe_runs_a_command() -> None:
    res = SystemProbe().run(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 10
    )
    assert (res.returncode, res.stdout.strip(), res.stderr.strip()) == (3, "out", "err")
    assert not res.ok and res.output == "out\nerr"


def test_system_probe_missing_tool_is_not_an_error() -> None:
    res = SystemProbe().run(["surely-not-a-real-tool-4242", "--version"], 5)
    assert res.missing and not res.ok and res.returncode is None


def test_system_probe_timeout_kills_the_command() -> None:
    start = time.monotonic()
    res = SystemProbe().run([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    assert res.timed_out and not res.ok
    assert time.monotonic() - start < 5


def test_system_probe_files(tmp_path: Path) -> None:
    probe = SystemProbe()
    (tmp_path / "a.txt").write_text("hello")
    assert probe.read_file(str(tmp_path / "a.txt")) == "hello"
    assert probe.read_file(str(tmp_path / "missing")) is None
    assert probe.exists(str(tmp_path / "a.txt")) and not probe.exists(str(tmp_path / "missing"))
    assert probe.listdir(str(tmp_path)) == ["a.txt"] and probe.listdir(str(tmp_path / "missing")) == []
    memory = probe.memory()
    assert memory is not None and 0 < memory.available <= memory.total
    assert (probe.disk_free(str(tmp_path / "not" / "yet" / "there")) or 0) > 0


def test_recorded_probe_answers_from_files() -> None:
    probe = RecordedProbe(FIXTURES / "driver-not-loaded")
    smi = probe.run(COMMANDS["nvidia-smi"], 5)
    assert smi.returncode == 9 and "couldn't communicate" in smi.stdout
    assert probe.run(COMMANDS["llama-server"], 5).missing
    assert probe.read_file("/etc/modprobe.d/blacklist-nouveau.conf") == "blacklist nouveau\noptions nouveau modeset=0\n"
    assert probe.read_file("/etc/nothing") is None
    assert probe.system == "Linux" and probe.env("HOME") == "/home/bench"
    memory = probe.memory()
    assert memory is not None and memory.total == 512 * 2**30


def test_recorded_probe_stderr_rc_and_timeout(tmp_path: Path) -> None:
    (tmp_path / "mokutil.stderr").write_text("EFI variables are not supported on this system\n")
    (tmp_path / "mokutil.rc").write_text("255\n")
    (tmp_path / "dkms.timeout").write_text("")
    probe = RecordedProbe(tmp_path)
    moku = probe.run(COMMANDS["mokutil"], 5)
    assert (moku.returncode, moku.stdout, moku.missing) == (255, "", False)
    assert probe.run(COMMANDS["dkms"], 5).timed_out
    assert probe.memory() is None and probe.disk_free("/") is None


def test_command_names() -> None:
    assert command_key(COMMANDS["nvidia-smi-query"]) == "nvidia-smi-query"
    assert command_key(("ls", "-l", "/dev/nvidia*")) == "ls_-l_dev_nvidia"
    assert display(COMMANDS["torch"]) == "python -c <torch probe>"
    assert display(COMMANDS["dkms"]) == "dkms status"


def test_every_fixture_file_is_known() -> None:
    """A misspelt fixture name would silently read as 'command missing'."""
    known = set(COMMANDS)
    for scenario in FIXTURES.iterdir():
        for path in scenario.iterdir():
            if path.is_file() and path.name != "scenario.json":
                assert path.name.rsplit(".", 1)[0] in known, path


@pytest.mark.parametrize("name", ["healthy-h100", "driver-not-loaded", "container-without-gpus", "recorded-h100-vm"])
def test_a_recording_replays_as_the_machine_answered(name: str, tmp_path: Path) -> None:
    """`doctor --record` over a machine (here a recorded one) writes a scenario that replays the same report."""
    original = run_doctor(RecordedProbe(FIXTURES / name))
    recorded = run_doctor(RecordingProbe(RecordedProbe(FIXTURES / name), tmp_path / "rec"))
    replayed = run_doctor(RecordedProbe(tmp_path / "rec"))
    assert original.to_json_dict() == recorded.to_json_dict() == replayed.to_json_dict()


def test_a_recording_keeps_no_secret_variables(tmp_path: Path) -> None:
    class Environ(RecordedProbe):
        def env(self, name: str) -> str | None:
            return {"HF_TOKEN": "hf_secret", "NVIDIA_VISIBLE_DEVICES": "0"}.get(name)

    probe = RecordingProbe(Environ(FIXTURES / "healthy-h100"), tmp_path / "rec")
    assert probe.env("HF_TOKEN") == "hf_secret" and probe.env("NVIDIA_VISIBLE_DEVICES") == "0"
    saved = (tmp_path / "rec" / "scenario.json").read_text()
    assert "hf_secret" not in saved and '"NVIDIA_VISIBLE_DEVICES": "0"' in saved


def test_doctor_record_then_fixtures_on_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(FIXTURES / "torch-cpu-build")
    first = in_process(capsys, "doctor", "--json", "--fixtures", scenario, "--record", str(tmp_path / "r"))
    again = in_process(capsys, "doctor", "--json", "--fixtures", str(tmp_path / "r"))
    assert first.returncode == again.returncode == 2
    assert first.stdout == again.stdout
