"""Bad input is reported as bad input, before any network call: against an unreachable URL the user
sees what to fix in the command (exit 2), not a connection error (exit 3).

The command runs in this process (`in_process`): the one-line error and the exit code come from
`main`, the same as for a real process, which the first test starts once to check the real exit path."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import pytest
from tests.conftest import in_process, tokenrace

from tokenrace.cli import COMMANDS, flag_for
from tokenrace.errors import InvalidInput
from tokenrace.load.arrivals import check_arrivals
from tokenrace.load.runner import Load

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens, a connect is refused


def _input_error(result: tuple[int, str, str], flag: str) -> str:
    rc, _, err = result
    err = err.strip()
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}"), err
    assert "127.0.0.1:9" not in err and "cannot reach" not in err and "Cannot connect" not in err, err
    return str(lines[0])


@pytest.mark.slow
def test_negative_rate_against_an_unreachable_url(tmp_path: Path) -> None:
    p = tokenrace("bench", "--url", UNREACHABLE, "--rate", "-3", "--requests", "2", "-o", str(tmp_path / "r"))
    assert "must be positive, got -3" in _input_error((p.returncode, p.stdout, p.stderr), "--rate")
    assert not (tmp_path / "r").exists()


def test_a_bad_line_in_the_prompts_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n{"prompt": \n')
    p = in_process(capsys, "bench", "--url", UNREACHABLE, "--prompts", str(prompts), "--requests", "2")
    assert f"{prompts}:2: not JSON" in _input_error(p, "--prompts")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--burstiness", "0", "--arrival", "gamma", "--rate", "2"], "--burstiness"),
        (["--max-concurrency", "0", "--rate", "2"], "--max-concurrency"),
        (["--tokenizer", "/no/such/tokenizer.json"], "--tokenizer"),
        (["--price", "in=1,out=1", "--gpu-hour-cost", "2"], "--price"),
        (["--gpus", "2"], "--gpus"),
        (["--slo", "speed=fast"], "--slo"),
        (["--prefix-groups", "0", "--shared-prefix-tokens", "32"], "--prefix-groups"),
        (["--shared-prefix-tokens", "0"], "--shared-prefix-tokens"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--timeout-connect", "-1"], "--timeout-connect"),
        (["--max-error-rate", "2"], "--max-error-rate"),
        (["--monitor", "--metrics-url", "garbage"], "--metrics-url"),
        (["--stages", "10s@x"], "--stages"),
        (["--turns", "0"], "--turns"),
        (["--hardware", "H100-SXM", "--model-config", "no-such-model-xyz"], "--model-config"),
        (["--hardware", "no-such-gpu-xyz", "--model-config", "llama-3.1-8b"], "--hardware"),
        (["--hardware", "H100-SXM", "--model-config", "llama-3.1-8b", "--precision", "bf99"], "--precision"),
    ],
)
def test_other_inputs_name_their_flag(args: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    _input_error(in_process(capsys, "bench", "--url", UNREACHABLE, "--requests", "2", *args), flag)


def test_a_bad_trace_file_names_the_trace_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("not json\n")
    p = in_process(capsys, "bench", "--url", UNREACHABLE, "--trace", str(trace), "--trace-format", "jsonl")
    assert f"{trace}:1" in _input_error(p, "--trace")


def test_an_output_directory_that_holds_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "records.jsonl").write_text("")
    p = in_process(capsys, "bench", "--url", UNREACHABLE, "--requests", "2", "-o", str(tmp_path / "r"))
    assert "already holds a run" in _input_error(p, "--output")


def test_an_engine_to_start_and_a_url_to_measure_are_not_both_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = in_process(capsys, "bench", "--engine", "vllm", "--url", UNREACHABLE, "-o", str(tmp_path / "r"))
    assert "leave out --url" in _input_error(p, "--engine vllm")


def test_the_core_names_the_input_not_the_flag() -> None:
    with pytest.raises(InvalidInput) as err:
        check_arrivals(-3.0, "poisson")
    assert err.value.param == "rate" and "--" not in str(err.value)
    with pytest.raises(InvalidInput) as err:
        Load(max_concurrency=0, rate=1.0, requests=1).validate()
    assert err.value.param == "max_concurrency" and "--" not in str(err.value)


CORE = (
    "client",
    "load",
    "figures",
    "runs",
    "sweep",
    "claim",
    "report",
    "plan",
    "doctor",
    "serve",
    "monitor",
    "quality",
)
# A raise whose message speaks of a command-line flag: `Error("--rate ...")`, `Error(f"... --output")`.
FLAG_IN_ERROR = re.compile(r"""(Error|InvalidInput)\((["'][a-z_]+["'],\s*)?f?["'][^"']*?(?<![\w-])--[a-z][a-z-]+""")


def test_core_errors_do_not_speak_flags() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "tokenrace"
    found = [
        f"{path.relative_to(src)}:{n}: {line.strip()}"
        for package in CORE
        for path in sorted((src / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if FLAG_IN_ERROR.search(line) and not re.search(r"vllm bench serve|tokenrace \w+ --", line)  # a command to run
    ]
    assert not found, "\n".join(found)
    assert FLAG_IN_ERROR.search('raise UsageError(f"--rate must be positive")')  # the pattern bites
    assert FLAG_IN_ERROR.search('raise UsageError("choose another --output")')


def test_every_input_the_core_names_has_a_flag() -> None:
    flags: set[str] = set()

    def collect(cmd: click.Command) -> None:
        for param in cmd.params:
            flags.update(o.split("/")[0] for o in (*param.opts, *param.secondary_opts))
        for sub in getattr(cmd, "commands", {}).values():
            collect(sub)

    for module in COMMANDS.values():
        collect(importlib.import_module(module).command)
    src = Path(__file__).resolve().parents[2] / "src" / "tokenrace"
    named = {
        m.group(1)
        for path in src.rglob("*.py")
        for m in re.finditer(r"""InvalidInput\(\s*f?["']([a-z_]+)["']""", path.read_text())
    }
    assert len(named) > 30, named  # the scan finds them
    assert not {p for p in named if flag_for(p) not in flags}, sorted(p for p in named if flag_for(p) not in flags)
