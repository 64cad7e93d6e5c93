"""Engine launching without a GPU: command building, readiness and failure handling with stubs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import wait_until

from tokenrace.errors import EngineError, UsageError
from tokenrace.serve.engines import LaunchSpec, build_command
from tokenrace.serve.process import EngineProcess, free_port, wait_ready


def test_vllm_command_has_the_guides_parameters() -> None:
    spec = LaunchSpec(
        "vllm",
        "/data/models/gemma-4-31b",
        host="0.0.0.0",
        port=8000,
        tensor_parallel_size=2,
        max_model_len=4096,
        gpu_memory_utilization=0.9,
        dtype="float16",
        quantization="awq",
        max_num_seqs=64,
    )
    assert build_command(spec) == [
        "vllm",
        "serve",
        "/data/models/gemma-4-31b",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "4096",
        "--gpu-memory-utilization",
        "0.9",
        "--dtype",
        "float16",
        "--quantization",
        "awq",
        "--max-num-seqs",
        "64",
    ]


def test_sglang_and_llamacpp_commands() -> None:
    sg = build_command(
        LaunchSpec(
            "sglang",
            "Qwen/Qwen2.5-7B-Instruct",
            port=30000,
            tensor_parallel_size=2,
            max_model_len=8192,
            gpu_memory_utilization=0.85,
        )
    )
    assert sg[1:3] == ["-m", "sglang.launch_server"]
    for pair in (
        ["--tp-size", "2"],
        ["--context-length", "8192"],
        ["--mem-fraction-static", "0.85"],
        ["--port", "30000"],
    ):
        i = sg.index(pair[0])
        assert sg[i : i + 2] == pair
    lc = build_command(
        LaunchSpec("llamacpp", "m.gguf", port=8080, max_model_len=4096, parallel=4), llama_server="/x/llama-server"
    )
    assert (
        lc[:3] == ["/x/llama-server", "-m", "m.gguf"]
        and lc[lc.index("-ngl") + 1] == "999"
        and lc[lc.index("-np") + 1] == "4"
    )


def test_bad_launch_values() -> None:
    with pytest.raises(UsageError):
        build_command(LaunchSpec("vllm", "m", gpu_memory_utilization=1.5))
    with pytest.raises(UsageError):
        build_command(LaunchSpec("tgi", "m"))


@pytest.mark.slow
def test_dry_run_prints_the_exact_command() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokenrace",
            "serve",
            "--engine",
            "vllm",
            "m/x",
            "--tensor-parallel-size",
            "4",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        out.returncode == 0
        and out.stdout.strip() == "vllm serve m/x --host 127.0.0.1 --port 8000 --tensor-parallel-size 4"
    )


@pytest.mark.slow
def test_missing_engine_says_how_to_install() -> None:
    env = {**os.environ, "PATH": "/nonexistent"}
    out = subprocess.run(
        [sys.executable, "-m", "tokenrace", "serve", "--engine", "vllm", "m/x"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 4 and "pip install vllm" in out.stderr


@pytest.mark.slow
def test_readiness_with_a_stub_engine_then_clean_stop() -> None:
    port = free_port()
    proc = EngineProcess([sys.executable, "-m", "tokenrace.fakes.fake_server", "--port", str(port)], "stub").start()
    try:
        ready = asyncio.run(wait_ready(proc, f"http://127.0.0.1:{port}", None, 30))
        assert ready.model == "fake-model"
    finally:
        code = proc.stop()
    assert not proc.alive() and code is not None


def test_engine_that_dies_shows_its_last_log_lines() -> None:
    script = "import sys; print('loading weights'); print('torch.OutOfMemoryError: CUDA out of memory'); sys.exit(3)"
    proc = EngineProcess([sys.executable, "-c", script], "stub").start()
    with pytest.raises(EngineError) as err:
        asyncio.run(wait_ready(proc, f"http://127.0.0.1:{free_port()}", None, 30))
    assert "exited with code 3" in str(err.value) and "CUDA out of memory" in str(err.value)


@pytest.mark.slow
def test_engine_that_never_answers_times_out_with_its_log() -> None:
    proc = EngineProcess(
        [sys.executable, "-c", "import time; print('still compiling graphs', flush=True); time.sleep(60)"], "stub"
    ).start()
    t = time.monotonic()
    try:
        with pytest.raises(EngineError) as err:
            asyncio.run(wait_ready(proc, f"http://127.0.0.1:{free_port()}", None, 1.5))
    finally:
        proc.stop()
    assert time.monotonic() - t < 20
    assert "not ready in time" in str(err.value) and "still compiling graphs" in str(err.value)


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); open({str(pidfile)!r}, 'w').write(str(c.pid)); "
        "time.sleep(60)"
    )
    proc = EngineProcess([sys.executable, "-c", script], "stub").start()
    child = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, "the child's pid file"))
    proc.stop(timeout=5)
    wait_until(lambda: _gone(child), 5, "the process the engine started to exit with it")


def test_no_orphan_when_the_parent_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "engine.pid"
    parent = (
        "import sys, time; from tokenrace.serve.process import EngineProcess; "
        "p = EngineProcess([sys.executable, '-c', 'import time; time.sleep(60)'], 'x').start(); "
        f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    par = subprocess.Popen([sys.executable, "-c", parent])
    # The file can exist before its number is written.
    engine_pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 20, "the engine's pid file"))
    par.kill()
    par.wait()
    wait_until(lambda: _gone(engine_pid), 5, "the engine to exit with its parent")


def _gone(pid: int) -> bool:
    """Exited (a zombie awaiting its reaper counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenrace", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": "/nonexistent"},
    )


@pytest.mark.slow
def test_refuses_a_model_that_cannot_fit_with_numbers_and_a_suggestion() -> None:
    p = _serve("--engine", "vllm", "gemma-4-31b", "--hardware", "RTX-4090", "--dtype", "bfloat16")
    assert p.returncode == 2
    line = p.stderr.strip()
    assert (
        "61.4 GB" in line
        and "24 GiB" in line
        and "AWQ" in line
        and "--tensor-parallel-size 4" in line
        and "--force" in line
    )


@pytest.mark.slow
def test_force_skips_the_refusal_and_a_fitting_plan_passes() -> None:
    forced = _serve("--engine", "vllm", "gemma-4-31b", "--hardware", "RTX-4090", "--dtype", "bfloat16", "--force")
    assert forced.returncode == 4 and "not installed" in forced.stderr  # it got past the fit check
    ok = _serve(
        "--engine",
        "vllm",
        "gemma-4-31b",
        "--hardware",
        "RTX-4090",
        "--tensor-parallel-size",
        "4",
        "--dtype",
        "bfloat16",
        "--dry-run",
    )
    assert ok.returncode == 0 and "fits on 4" in ok.stderr


@pytest.mark.slow
def test_unknown_model_is_not_refused() -> None:
    p = _serve("--engine", "vllm", "some-org/unknown-model-xyz", "--hardware", "H100-SXM", "--dry-run")
    assert p.returncode == 0 and "fit not checked" in p.stderr
