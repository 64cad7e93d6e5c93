"""The one seam between doctor and the machine.

Every command doctor runs and every file it reads goes through a `Probe`. `SystemProbe` asks the
real machine (subprocess with a timeout, the real filesystem); `RecordedProbe` answers from a
fixtures folder, so every check can be tested on recorded healthy and broken environments.

A recorded scenario folder holds:
- `<name>.txt` (stdout), `<name>.stderr`, `<name>.rc` (exit code, default 0), `<name>.timeout`
  (the command hung) for each command named in `tokenrace.doctor.commands.COMMANDS`; a command
  with none of these files is missing from the machine;
- `files/` — a tree standing in for `/` (`files/proc/modules`, `files/etc/modprobe.d/...`);
- `scenario.json` — optional `{"description", "system", "env", "memory", "disk_free"}`.

`RecordingProbe` writes such a folder while it asks the real machine (`tokenrace doctor --record`),
so a machine nobody here can reach becomes a scenario the tests replay.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from tokenrace.doctor.commands import command_key


@dataclass(frozen=True)
class ProbeResult:
    cmd: tuple[str, ...]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    missing: bool = False
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return not self.missing and not self.timed_out and self.returncode == 0

    @property
    def output(self) -> str:
        """stdout and stderr together, the way a person at a terminal sees them."""
        return "\n".join(part for part in (self.stdout.rstrip(), self.stderr.rstrip()) if part)


@dataclass(frozen=True)
class Memory:
    total: int
    available: int


class Probe(Protocol):
    """What doctor may ask of a machine."""

    @property
    def system(self) -> str:
        """`platform.system()` of the machine: Linux, Windows, Darwin."""
        ...

    def run(self, cmd: Sequence[str], timeout: float) -> ProbeResult: ...

    def read_file(self, path: str) -> str | None: ...

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def env(self, name: str) -> str | None: ...

    def memory(self) -> Memory | None: ...

    def disk_free(self, path: str) -> int | None: ...


class SystemProbe:
    """The real machine. Never raises for a missing tool, a hung command or an unreadable file."""

    @property
    def system(self) -> str:
        return platform.system()

    def run(self, cmd: Sequence[str], timeout: float) -> ProbeResult:
        argv = tuple(cmd)
        if shutil.which(argv[0]) is None:
            return ProbeResult(argv, None, missing=True)
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "LC_ALL": "C", "LANG": "C"},
                start_new_session=os.name == "posix",
            )
        except (FileNotFoundError, NotADirectoryError):
            return ProbeResult(argv, None, missing=True)
        except OSError as err:
            return ProbeResult(argv, 126, stderr=str(err))
        try:
            out, errs = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return ProbeResult(argv, None, timed_out=True)
        return ProbeResult(argv, proc.returncode, _text(out), _text(errs))

    def read_file(self, path: str) -> str | None:
        try:
            with open(path, "rb") as fh:
                return _text(fh.read(1_000_000))
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    def memory(self) -> Memory | None:
        try:
            import psutil  # noqa: PLC0415 - import cost: the probe stays cheap to import; psutil only when memory is asked for

            vm = psutil.virtual_memory()
        except Exception:  # noqa: BLE001 - psutil can fail in odd sandboxes
            return None
        return Memory(total=int(vm.total), available=int(vm.available))

    def disk_free(self, path: str) -> int | None:
        target = _existing_ancestor(path)
        try:
            return shutil.disk_usage(target).free
        except OSError:
            return None


class Scenario(BaseModel):
    """A recorded scenario's scenario.json (every key optional)."""

    description: str = ""
    system: str = "Linux"
    env: dict[str, str] = Field(default_factory=dict)
    memory: Memory | None = None
    disk_free: int | None = None


class RecordedProbe:
    """A machine recorded in a fixtures folder (see the module docstring)."""

    def __init__(self, scenario: str | os.PathLike[str]) -> None:
        self.root = Path(scenario)
        if not self.root.is_dir():
            raise FileNotFoundError(f"no such scenario folder: {self.root}")
        meta = self.root / "scenario.json"
        self.meta = Scenario.model_validate_json(meta.read_bytes()) if meta.is_file() else Scenario()

    @property
    def system(self) -> str:
        return self.meta.system

    @property
    def description(self) -> str:
        return self.meta.description

    def run(self, cmd: Sequence[str], timeout: float) -> ProbeResult:
        argv = tuple(cmd)
        key = command_key(argv)
        stdout, stderr, rc = (self.root / f"{key}{ext}" for ext in (".txt", ".stderr", ".rc"))
        if (self.root / f"{key}.timeout").exists():
            return ProbeResult(argv, None, timed_out=True)
        if not (stdout.exists() or stderr.exists() or rc.exists()):
            return ProbeResult(argv, None, missing=True)
        code = int(rc.read_text().strip()) if rc.exists() else 0
        return ProbeResult(argv, code, _read(stdout), _read(stderr))

    def read_file(self, path: str) -> str | None:
        target = self._file(path)
        return _read(target) if target.is_file() else None

    def exists(self, path: str) -> bool:
        return self._file(path).exists()

    def listdir(self, path: str) -> list[str]:
        target = self._file(path)
        return sorted(p.name for p in target.iterdir()) if target.is_dir() else []

    def env(self, name: str) -> str | None:
        return self.meta.env.get(name)

    def memory(self) -> Memory | None:
        return self.meta.memory

    def disk_free(self, path: str) -> int | None:
        return self.meta.disk_free

    def _file(self, path: str) -> Path:
        return self.root / "files" / path.lstrip("/\\")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        proc.communicate(timeout=2)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _existing_ancestor(path: str) -> str:
    current = Path(path).expanduser()
    while not current.exists() and current != current.parent:
        current = current.parent
    return str(current)


# Environment variables a recording never keeps, whatever doctor asks: their values may be secrets.
_SECRET_NAME = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


class RecordingProbe:
    """Asks another probe (the real machine) and writes every answer as a `RecordedProbe` folder.

    Commands become `<name>.txt/.stderr/.rc/.timeout`, files read under `files/`, and the system,
    the environment variables asked for, memory and free disk go to scenario.json, which is
    rewritten after each answer so an interrupted run still leaves a scenario that replays.
    """

    def __init__(self, inner: Probe, folder: str | os.PathLike[str], description: str = "") -> None:
        self.inner = inner
        self.root = Path(folder)
        self.root.mkdir(parents=True, exist_ok=True)
        self.meta = Scenario(description=description, system=inner.system)
        self._save()

    @property
    def system(self) -> str:
        return self.inner.system

    def run(self, cmd: Sequence[str], timeout: float) -> ProbeResult:
        result = self.inner.run(cmd, timeout)
        key = command_key(tuple(cmd))
        if result.timed_out:
            (self.root / f"{key}.timeout").write_text("")
        elif not result.missing:
            (self.root / f"{key}.txt").write_text(result.stdout, encoding="utf-8")
            if result.stderr:
                (self.root / f"{key}.stderr").write_text(result.stderr, encoding="utf-8")
            if result.returncode:
                (self.root / f"{key}.rc").write_text(f"{result.returncode}\n")
        return result

    def read_file(self, path: str) -> str | None:
        text = self.inner.read_file(path)
        if text is not None:
            target = self._file(path)
            _make_folder(target.parent)
            target.write_text(text, encoding="utf-8")
        return text

    def exists(self, path: str) -> bool:
        found = self.inner.exists(path)
        target = self._file(path)
        if found and not target.exists():
            # An empty stand-in: replay answers `exists` from the tree; a later read overwrites it.
            _make_folder(target.parent)
            if not self.inner.listdir(path):
                target.touch()
            else:
                target.mkdir(exist_ok=True)
        return found

    def listdir(self, path: str) -> list[str]:
        names = self.inner.listdir(path)
        folder = self._file(path)
        for name in names:
            entry = folder / name
            if not entry.exists():
                _make_folder(entry.parent)
                entry.touch()
        return names

    def env(self, name: str) -> str | None:
        value = self.inner.env(name)
        if value is not None and not any(word in name.upper() for word in _SECRET_NAME):
            self.meta.env[name] = value
            self._save()
        return value

    def memory(self) -> Memory | None:
        self.meta.memory = self.inner.memory()
        self._save()
        return self.meta.memory

    def disk_free(self, path: str) -> int | None:
        self.meta.disk_free = self.inner.disk_free(path)
        self._save()
        return self.meta.disk_free

    def _file(self, path: str) -> Path:
        return self.root / "files" / path.lstrip("/\\")

    def _save(self) -> None:
        (self.root / "scenario.json").write_text(self.meta.model_dump_json(indent=2) + "\n")


def _make_folder(folder: Path) -> None:
    """mkdir -p, where an empty stand-in file recorded by `listdir` may sit on the way."""
    for step in reversed((folder, *folder.parents)):
        if step.is_file() and step.stat().st_size == 0:
            step.unlink()
    folder.mkdir(parents=True, exist_ok=True)
