"""vLLM's CPU build: how it is found, the command line, and the cached conversion (no vLLM needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenrace.errors import EngineError
from tokenrace.serve.vllm_cpu import (
    VllmCpuOptions,
    converted,
    find_vllm_python,
    hf_folder,
    require_vllm_python,
    vllm_cpu_command,
    vllm_cpu_env,
)


def test_the_command_starts_the_server_module_with_the_cpu_settings(tmp_path: Path) -> None:
    python = tmp_path / "python"
    argv = vllm_cpu_command(python, tmp_path / "model", "smol", 8123, VllmCpuOptions(max_num_seqs=4, extra=("--x",)))
    # Not the `vllm` console script: it asks for a distribution named vllm, and this one is vllm-cpu.
    assert argv[:3] == [str(python), "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--model"] == str(tmp_path / "model") and flags["--served-model-name"] == "smol"
    assert flags["--port"] == "8123" and flags["--dtype"] == "float32" and flags["--max-model-len"] == "2048"
    assert "--enforce-eager" in argv and argv[-3:] == ["--max-num-seqs", "4", "--x"]
    env = vllm_cpu_env(VllmCpuOptions())
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["HF_HUB_OFFLINE"] == "1"
    # The development routes stay closed unless asked for (tests/vllm clears the prefix cache).
    assert "VLLM_SERVER_DEV_MODE" not in env
    assert vllm_cpu_env(VllmCpuOptions(dev_mode=True))["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--runner" not in argv and "--convert" not in argv  # the generating runner unless asked


def test_embeddings_start_the_pooling_runner_on_the_chat_model(tmp_path: Path) -> None:
    argv = vllm_cpu_command(tmp_path / "python", tmp_path / "model", "smol", 8123, VllmCpuOptions(embeddings=True))
    assert argv[argv.index("--runner") + 1] == "pooling" and argv[argv.index("--convert") + 1] == "embed", argv


def test_the_interpreter_named_by_the_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("TOKENRACE_VLLM_PYTHON", str(python))
    assert find_vllm_python() == python
    monkeypatch.setenv("TOKENRACE_VLLM_PYTHON", str(tmp_path / "missing"))
    assert find_vllm_python() is None
    with pytest.raises(EngineError, match="setup.sh --engines"):
        require_vllm_python()


def test_a_converted_folder_is_reused_and_a_failed_conversion_says_why(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"not really a gguf")
    folder = hf_folder(gguf)
    assert folder.parent.parent == tmp_path / "home" and folder.name.startswith("m-hf-")  # TOKENRACE_HOME
    # The interpreter cannot run the converter: the error carries its exit and output.
    with pytest.raises(EngineError, match="failed"):
        converted(gguf, Path("/bin/false"))
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert converted(gguf, Path("/bin/false")) == folder  # cached: nothing runs
