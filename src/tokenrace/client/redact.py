"""Keep secrets out of every file, log line and exception text."""

from __future__ import annotations

import re

_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-~+/=]{8,}")
_KEYLIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{8,}|gsk_[A-Za-z0-9]{8,}|sk-or-[A-Za-z0-9_\-]{8,})")
_SECRET_FLAGS = ("--api-key", "--admin-key", "--key")


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
