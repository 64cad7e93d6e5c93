from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

import tokenrace.plan
from tokenrace.doctor.model_size import model_size, weights_bytes
from tokenrace.doctor.probe import RecordedProbe
from tokenrace.doctor.result import Status
from tokenrace.doctor.runner import run_doctor
from tokenrace.errors import UsageError

from .scenarios import FIXTURES

GiB = 2**30


def sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def test_local_folder_counts_weight_files(tmp_path: Path) -> None:
    sparse(tmp_path / "m" / "model-00001-of-00002.safetensors", 3 * GiB)
    sparse(tmp_path / "m" / "model-00002-of-00002.safetensors", 2 * GiB)
    (tmp_path / "m" / "config.json").write_text("{}")
    size = model_size(str(tmp_path / "m"))
    assert (size.weights_bytes, size.source) == (5 * GiB, "local files")
    assert "planner" in size.note


def test_planner_is_asked_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        tokenrace.plan, "load_model", lambda name: SimpleNamespace(weights_bytes=62 * 10**9), raising=False
    )
    size = model_size("google/gemma-4-31b-it")
    assert (size.weights_bytes, size.source, size.local_path) == (62 * 10**9, "planner", None)


def test_a_name_the_planner_does_not_know() -> None:
    size = model_size("some-org/some-model")
    assert size.weights_bytes is None and size.source == "unknown"
    with pytest.raises(UsageError):
        model_size("/no/such/weights.gguf")


def test_weights_bytes_shapes() -> None:
    assert weights_bytes({"weights_bytes": 10}) == 10
    assert weights_bytes(SimpleNamespace(size_bytes=lambda: 7)) == 7
    assert weights_bytes(SimpleNamespace(name="x")) is None


def checks(root: Path, model: str) -> dict[str, tuple[Status, str]]:
    report = run_doctor(RecordedProbe(root), model=model, with_environment=False)
    return {c.id: (c.status, c.kb or "") for c in report.checks if c.id.startswith("model-")}


def test_hub_model_too_big_for_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokenrace.plan, "load_model", lambda name: {"weights_bytes": 62 * GiB}, raising=False)
    found = checks(FIXTURES / "no-gpu", "google/gemma-4-31b-it")  # 40 GiB disk, 16 GiB RAM, no GPU
    assert found == {
        "model-disk": (Status.FAIL, ""),
        "model-ram": (Status.FAIL, "model-load-stalls"),
        "model-vram": (Status.SKIP, ""),
    }


def test_gpu_memory_against_the_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    for weights, expected in [
        (50 * GiB, (Status.OK, "")),
        (70 * GiB, (Status.WARN, "cuda-oom")),
        (90 * GiB, (Status.FAIL, "cuda-oom")),
    ]:
        monkeypatch.setattr(tokenrace.plan, "load_model", lambda name, w=weights: {"weights_bytes": w}, raising=False)
        assert checks(FIXTURES / "healthy-h100", "google/gemma-4-31b-it")["model-vram"] == expected, weights


def test_tensor_parallel_hint(copy_scenario: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy_scenario("healthy-h100")
    (root / "nvidia-smi-query.txt").write_text(
        "".join(f"{i}, NVIDIA H100 80GB HBM3, 81559, 550.54.15, 00000000:{18 + i}:00.0\n" for i in range(4))
    )
    monkeypatch.setattr(tokenrace.plan, "load_model", lambda name: {"weights_bytes": 140 * GiB}, raising=False)
    report = run_doctor(RecordedProbe(root), model="meta-llama/Llama-3.1-70B-Instruct", with_environment=False)
    vram = report.get("model-vram")
    assert vram.status is Status.OK and vram.details["tensor_parallel"] == 4


def test_disk_tight_and_ram_busy(copy_scenario: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy_scenario("no-gpu")
    (root / "scenario.json").write_text(
        '{"memory": {"total": 17179869184, "available": 4294967296}, "disk_free": 11811160064}'
    )
    monkeypatch.setattr(tokenrace.plan, "load_model", lambda name: {"weights_bytes": 10 * GiB}, raising=False)
    found = checks(root, "org/model-10g")
    assert found["model-disk"][0] is Status.WARN and found["model-ram"] == (Status.WARN, "model-load-stalls")


def test_model_checks_only_with_model() -> None:
    report = run_doctor(RecordedProbe(FIXTURES / "healthy-h100"), with_environment=False)
    assert not [c for c in report.checks if c.id.startswith("model-")]
