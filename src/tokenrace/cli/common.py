"""Small parsers shared by command modules."""

from __future__ import annotations

import json
from typing import Any

import click

from tokenrace.errors import UsageError

# click's parsed option values. Their types are set by the option declarations, which mypy cannot see,
# so the CLI edge takes them as Any and the core receives typed settings built from them.
Options = dict[str, Any]


def parse_duration_s(text: str | None, flag: str = "--duration") -> float | None:
    """`90`, `90s`, `5m`, `1h`, `250ms` -> seconds."""
    if text is None:
        return None
    t = text.strip().lower()
    for suffix, scale in (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], scale
            break
    else:
        mult = 1.0
    try:
        value = float(t) * mult
    except ValueError:
        raise UsageError(f"{flag}: cannot read {text!r} (use 90, 90s, 5m)") from None
    if value <= 0:
        raise UsageError(f"{flag} must be positive")
    return value


def parse_mean_std(text: str | None, flag: str) -> tuple[int, float] | None:
    """`512` or `512,64` -> (mean, std)."""
    if text is None:
        return None
    parts = text.split(",")
    try:
        mean = int(parts[0])
        std = float(parts[1]) if len(parts) > 1 else 0.0
    except ValueError:
        raise UsageError(f"{flag}: expected MEAN or MEAN,STD in tokens, got {text!r}") from None
    if mean < 1 or std < 0 or len(parts) > 2:
        raise UsageError(f"{flag}: expected MEAN>=1 and STD>=0, got {text!r}")
    return mean, std


def parse_json_object(text: str | None, flag: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{flag}: expected a JSON object")
    return obj


def parse_headers(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        name, sep, value = v.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header: expected 'Name: value', got {v!r}")
        out[name.strip()] = value.strip()
    return out


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))
