"""Small parsers shared by command modules."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
from pydantic import JsonValue
from rich.console import Console

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


def parse_json_object(text: str | None, flag: str) -> dict[str, JsonValue]:
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{flag}: expected a JSON object")
    return obj


def parse_headers(values: tuple[str, ...]) -> tuple[dict[str, str], tuple[str, ...]]:
    """`Name: value` pairs -> (headers, names whose values came from the environment).

    `Name: env:VAR` takes the value from the variable VAR, so a key need not be typed on the
    command line; such a value is secret whatever the header's name.
    """
    out: dict[str, str] = {}
    from_env: list[str] = []
    for v in values:
        name, sep, value = v.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            # The value is not echoed: it may be a key typed with the wrong separator.
            raise UsageError(
                f"--header: expected 'Name: value' (or 'Name: env:VAR'), got {len(v)} characters without ':'"
            )
        if value.startswith("env:"):
            var = value[4:].strip()
            if not var or var not in os.environ:
                raise UsageError(f"--header {name}: the environment variable {var!r} is not set")
            value = os.environ[var]
            from_env.append(name)
        out[name] = value
    return out, tuple(from_env)


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def stdout_console() -> Console:
    """Rich's console on stdout; 120 columns when stdout is a file or a pipe (rich's default of 80
    would cut the per-step table)."""
    return Console() if sys.stdout.isatty() else Console(width=120)


def wide_console() -> Console:
    """A terminal's own width; 160 columns when printing to a file or pipe (rich would use 80)."""
    return Console() if sys.stdout.isatty() else Console(width=160)
