"""Keep secrets out of every file, log line and exception text."""

from __future__ import annotations

import re
from typing import Any

_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-~+/=]{8,}")
_KEYLIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{8,}|gsk_[A-Za-z0-9]{8,}|sk-or-[A-Za-z0-9_\-]{8,})")
_SECRET_FLAGS = ("--api-key", "--admin-key", "--key")
# Header names whose values are credentials: the standard ones, and any name that speaks of a key,
# a token or a secret (x-api-key, api-key, x-auth-token, a gateway's own x-secret-...).
_SECRET_HEADER = re.compile(r"(?i)^(authorization|proxy-authorization|cookie|set-cookie)$|key|token|secret")
# JSON body fields: whole words only, so `max_tokens` or `top_k` stay readable.
_SECRET_FIELD_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "authorization", "cookie"})
HIDDEN = "***"


class Redactor:
    """Scrubs known secret values and anything shaped like an API key."""

    def __init__(self, *secrets: str | None) -> None:
        self._secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= 4 and secret not in self._secrets:
            self._secrets.append(secret)
            self._secrets.sort(key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "***")
        text = _BEARER.sub(r"\1***", text)
        return _KEYLIKE.sub("***", text)


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with the values of secret flags replaced by ***."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}=***")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def is_secret_header(name: str) -> bool:
    return bool(_SECRET_HEADER.search(name.strip()))


def is_secret_field(name: str) -> bool:
    """A JSON body field that holds a credential: `api_key`, `access-token`, `client_secret`, ..."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return any(w in _SECRET_FIELD_WORDS for w in words)


def redact_headers(headers: dict[str, str], marked: frozenset[str] = frozenset()) -> dict[str, str]:
    """The headers with credential values hidden: secret-looking names, and the names in `marked`."""
    hidden = {m.lower() for m in marked}
    return {k: HIDDEN if is_secret_header(k) or k.lower() in hidden else v for k, v in headers.items()}


def hidden_headers(headers: dict[str, str] | None) -> dict[str, str] | None:
    """`redact_headers` of headers that may be absent (a saved file's validator)."""
    return None if headers is None else redact_headers(headers)


def redact_fields(obj: Any) -> Any:
    """A JSON value with the string values of secret-looking fields hidden, at any depth."""
    if isinstance(obj, dict):
        return {
            k: HIDDEN if is_secret_field(str(k)) and isinstance(v, str) else redact_fields(v) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact_fields(v) for v in obj]
    return obj


def secret_values(headers: dict[str, str], body: Any, marked: frozenset[str] = frozenset()) -> list[str]:
    """Every value `redact_headers` and `redact_fields` would hide: what a Redactor must scrub."""
    hidden = redact_headers(headers, marked)
    out = [v for k, v in headers.items() if hidden[k] == HIDDEN]
    out += _field_secrets(body)
    return [v for v in out if v]


def _field_secrets(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [
            s
            for k, v in obj.items()
            for s in ([v] if is_secret_field(str(k)) and isinstance(v, str) else _field_secrets(v))
        ]
    if isinstance(obj, list):
        return [s for v in obj for s in _field_secrets(v)]
    return []
