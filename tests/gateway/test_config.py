"""Config validation: clear errors that point to the line and key; secrets never echoed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tests.conftest import fake_key, in_process, tokenrace

from tokenrace.cli import gateway as cli_gateway
from tokenrace.gateway.config import ConfigError, parse_config, resolve_secrets

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
backends:
  vllm:
    url: http://gpu-box:8000/v1
  groq:
    url: https://api.groq.com/openai/v1
    api_key_env: GROQ_API_KEY
routes:
  - model: llama
    backends:
      - {backend: vllm, weight: 95}
      - {backend: groq, weight: 5}
auth:
  keys: [{name: app, key_env: APP_KEY}]
"""
ENV = {"GROQ_API_KEY": fake_key("gsk_"), "APP_KEY": "client-key-123456"}


def problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "gateway.yaml", ENV if env is None else env)
    return info.value.problems


def test_a_good_file_validates_with_defaults() -> None:
    config = parse_config(GOOD, "gateway.yaml", ENV)
    assert [t.weight for t in config.routes[0].backends] == [95, 5]
    assert config.retry.attempts == 2 and config.backends["vllm"].breaker.failures == 5
    assert config.auth.required is True


def test_negative_weight_points_to_its_line_and_key() -> None:
    bad = GOOD.replace("{backend: groq, weight: 5}", "{backend: groq, weight: -1}")
    assert problems(bad) == ["gateway.yaml:11:25: routes[0].backends[1].weight: must be >= 0 (got -1)"]


def test_a_misspelt_key_gets_a_suggestion() -> None:
    bad = GOOD.replace(
        "    url: http://gpu-box:8000/v1", "    url: http://gpu-box:8000/v1\n    timeouts: {conect_s: 2}"
    )
    assert problems(bad) == [
        "gateway.yaml:4:16: backends.vllm.timeouts.conect_s: unknown key (did you mean 'connect_s'?)"
    ]


def test_unknown_backend_names_the_defined_ones() -> None:
    bad = GOOD.replace("{backend: groq, weight: 5}", "{backend: grok, weight: 5}")
    assert problems(bad) == [
        "gateway.yaml:11:10: routes[0].backends[1].backend: unknown backend 'grok' (defined: groq, vllm)"
    ]


def test_every_problem_is_reported_and_the_first_is_the_message() -> None:
    bad = GOOD.replace("weight: 95", "weight: lots").replace("https://api.groq.com/openai/v1", "api.groq.com")
    found = problems(bad)
    assert len(found) == 2
    assert any(
        "backends.groq.url: must start with http:// or https://" in p and p.startswith("gateway.yaml:5:5:")
        for p in found
    )
    assert any(p.startswith("gateway.yaml:10:25: routes[0].backends[0].weight: must be a number") for p in found)
    with pytest.raises(ConfigError) as info:
        parse_config(bad, "gateway.yaml", ENV)
    assert "(and 1 more" in str(info.value) and "\n" not in str(info.value)


def test_duplicate_keys_and_models_are_errors() -> None:
    dup_key = GOOD.replace("  groq:\n", "  vllm:\n", 1)
    assert problems(dup_key)[0] == "gateway.yaml:4:3: backends.vllm: duplicate key (first on line 2)"
    dup_model = GOOD + ""
    dup_model = dup_model.replace("auth:", "  - model: llama\n    backends: [vllm]\nauth:")
    assert problems(dup_model) == ["gateway.yaml:12:5: routes[1].model: 'llama' is already routed by routes[0]"]


def test_missing_environment_variable_points_to_the_key() -> None:
    assert problems(GOOD, {"APP_KEY": "x"}) == [
        "gateway.yaml:6:5: backends.groq.api_key_env: environment variable GROQ_API_KEY is not set"
    ]
    parse_config(GOOD, "gateway.yaml", {}, check_env=False)  # `check --no-env`


def test_auth_is_required_unless_switched_off() -> None:
    no_auth = GOOD.split("auth:")[0]
    assert "auth: required: list client keys" in problems(no_auth)[0]
    parse_config(no_auth + "auth: {required: false}\n", "gateway.yaml", ENV)
    assert "keys: list at least one client key" in problems(no_auth + "auth: {keys: []}\n")[0]


def test_unreadable_yaml_gives_its_line() -> None:
    assert problems("backends:\n  a: [\n")[0].startswith("gateway.yaml:3:1: ")
    assert problems("- just a list\n") == ["gateway.yaml:1:1: the file must be a mapping with backends: and routes:"]


def test_canary_rules() -> None:
    canary = GOOD.replace("      - {backend: groq, weight: 5}\n", "    canary: {backend: groq, steps: [5, 1]}\n")
    assert problems(canary) == ["gateway.yaml:11:36: routes[0].canary.steps: steps must increase"]
    same = GOOD.replace("      - {backend: groq, weight: 5}\n", "    canary: {backend: vllm}\n")
    assert problems(same) == [
        "gateway.yaml:11:14: routes[0].canary.backend: 'vllm' is also a baseline backend of this route"
    ]


def test_a_key_pasted_into_the_file_is_never_echoed() -> None:
    pasted = fake_key("gsk_", "pasted")
    leaked = GOOD.replace("api_key_env: GROQ_API_KEY", f"api_key_env: {pasted}")
    text = "\n".join(problems(leaked))
    assert pasted not in text and "***" in text
    in_header = fake_key("sk-", "header")
    header = GOOD.replace("    api_key_env: GROQ_API_KEY", f"    headers: {{Authorization: Bearer {in_header}}}")
    text = "\n".join(problems(header))
    assert in_header not in text and "use api_key_env" in text


def test_secrets_are_read_from_the_environment_and_hidden() -> None:
    config = parse_config(GOOD, "gateway.yaml", ENV)
    secrets = resolve_secrets(config, ENV)
    assert secrets.upstream["groq"].reveal() == ENV["GROQ_API_KEY"]
    assert ENV["GROQ_API_KEY"] not in repr(secrets) and ENV["GROQ_API_KEY"] not in str(secrets.upstream["groq"])
    assert ENV["APP_KEY"] not in repr(secrets)  # client keys are kept as digests only


def test_key_digest_instead_of_env() -> None:
    digest = hashlib.sha256(b"client-key-123456").hexdigest()
    text = GOOD.replace("key_env: APP_KEY", f"key_sha256: {digest}")
    secrets = resolve_secrets(parse_config(text, "g", ENV), ENV)
    assert secrets.client_digests == {digest: "app"}
    assert (
        "give exactly one of key_env or key_sha256" in problems(GOOD.replace("key_env: APP_KEY", "key_sha256: null"))[0]
    )


def test_the_example_file_is_valid_and_twenty_lines() -> None:
    path = ROOT / "examples" / "gateway.yaml"
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) <= 20
    parse_config(path.read_text(), str(path), {}, check_env=False)


def test_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code, out, err = in_process(capsys, "gateway", "check", "--no-env", str(ROOT / "examples" / "gateway.yaml"))
    assert code == 0, err
    assert "OK: 2 backends; 1 route; canary on llama-3.1-8b: groq 5% -> 25% -> 100%" in out
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(GOOD.replace("weight: 5}", "weight: -5}"))
    code, _, err = in_process(capsys, "gateway", "check", "--no-env", str(bad_file))
    assert code == 2
    assert err.strip() == f"{bad_file}:11:25: routes[0].backends[1].weight: must be >= 0 (got -5)"
    # A real process, for the exit path: a file that cannot be read is one line and exit 2.
    missing = tokenrace("gateway", "--config", str(tmp_path / "nope.yaml"), cwd=ROOT, timeout=60)
    assert missing.returncode == 2 and "cannot read" in missing.stderr and missing.stderr.count("\n") == 1


def test_without_the_extra_the_command_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_gateway, "EXTRA_MODULES", (*cli_gateway.EXTRA_MODULES, "tokenrace_no_such_module"))
    code, out, err = in_process(capsys, "gateway", "check", "--no-env", str(ROOT / "examples" / "gateway.yaml"))
    assert code == 2 and not out
    assert err.strip() == (
        "error: tokenrace gateway needs the gateway extra (missing: tokenrace_no_such_module): "
        "pip install 'tokenrace[gateway]'"
    )
