from __future__ import annotations

import pytest
from tests.conftest import fake_key

from tokenrace.client.providers import hosted_provider, normalize_base_url, provider_api, resolve_endpoint
from tokenrace.engines import server_root
from tokenrace.errors import UsageError
from tokenrace.redact import Redactor, redact_argv


@pytest.mark.parametrize(
    "url,base",
    [
        ("http://localhost:8000/v1", "http://localhost:8000/v1"),
        ("http://localhost:8000", "http://localhost:8000/v1"),
        ("http://localhost:8000/", "http://localhost:8000/v1"),
        ("https://api.groq.com/openai/v1", "https://api.groq.com/openai/v1"),
        ("http://h:1/v1/chat/completions", "http://h:1/v1"),
    ],
)
def test_base_urls_like_the_openai_sdk(url: str, base: str) -> None:
    assert normalize_base_url(url) == base


def test_bad_url() -> None:
    with pytest.raises(UsageError):
        normalize_base_url("localhost:8000")


def test_server_root() -> None:
    assert server_root("http://h:8080/v1") == "http://h:8080"


def test_precedence_and_key_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROQ_API_KEY", fake_key("gsk_"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other")
    e = resolve_endpoint(None, None, "groq")
    assert e is not None and e.base_url == "https://api.groq.com/openai/v1"
    assert e.api_key == fake_key("gsk_") and e.key_source == "GROQ_API_KEY"
    e = resolve_endpoint("http://x:1", "k-flag", "groq")
    assert e is not None and e.base_url == "http://x:1/v1" and e.key_source == "--api-key"
    monkeypatch.delenv("GROQ_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env:9/v1")
    e = resolve_endpoint(None, None, None)
    assert e is not None and e.base_url == "http://env:9/v1" and e.key_source == "OPENAI_API_KEY"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert resolve_endpoint(None, None, None) is None
    with pytest.raises(UsageError):
        resolve_endpoint(None, None, "nope")


def test_redaction() -> None:
    r = Redactor("my-secret-value")
    assert (
        r(f"failed with my-secret-value and Bearer abcdefghijk123 and {fake_key('sk-')}")
        == "failed with *** and Bearer *** and ***"
    )
    assert redact_argv(["bench", "--api-key", "s3cret", "--api-key=s3cret", "--url", "u"]) == [
        "bench",
        "--api-key",
        "***",
        "--api-key=***",
        "--url",
        "u",
    ]


def test_anthropic_preset_and_the_messages_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", fake_key("sk-ant-"))
    monkeypatch.setenv("OPENAI_API_KEY", fake_key("sk-", "openai"))
    assert provider_api("anthropic") == "messages" and provider_api("groq") == "chat" and provider_api(None) is None
    e = resolve_endpoint(None, None, "anthropic", "messages")
    assert e is not None and e.base_url == "https://api.anthropic.com/v1"
    assert (e.api_key, e.key_source) == (fake_key("sk-ant-"), "ANTHROPIC_API_KEY")
    e = resolve_endpoint("http://h:1", None, None, "messages")
    assert e is not None and e.key_source == "ANTHROPIC_API_KEY"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    e = resolve_endpoint("http://h:1", None, None, "messages")
    # An OpenAI key is never sent to the Messages API: no key, and the variable to set is named.
    assert e is not None and e.api_key is None and e.key_source == "ANTHROPIC_API_KEY"
    e = resolve_endpoint("http://h:1", None, None, "embeddings")
    assert e is not None and e.key_source == "OPENAI_API_KEY"
    assert normalize_base_url("http://h:1/v1/embeddings") == "http://h:1/v1"


@pytest.mark.parametrize(
    "name,base,env",
    [
        ("cerebras", "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"),
        ("sambanova", "https://api.sambanova.ai/v1", "SAMBANOVA_API_KEY"),
    ],
)
def test_record_speed_vendors_have_presets(monkeypatch: pytest.MonkeyPatch, name: str, base: str, env: str) -> None:
    """Cerebras and SambaNova beside Groq: their own base URL and key variable, and their host is
    known as theirs (a --url to it is priced and reported as that provider)."""
    monkeypatch.setenv(env, fake_key("key-", name))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other")  # never sent to another vendor while the preset's is set
    e = resolve_endpoint(None, None, name)
    assert e is not None and (e.base_url, e.api_key, e.key_source, e.provider) == (
        base,
        fake_key("key-", name),
        env,
        name,
    )
    assert hosted_provider(f"{base}/chat/completions") == name and provider_api(name) == "chat"
