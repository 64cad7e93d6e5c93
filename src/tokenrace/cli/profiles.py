"""`--profile NAME` on bench, sweep and claim: a reference's workload as defaults that flags override.

The profile's values are written into the parsed options before the settings are built from them,
for each option the command line did not set, so every later check sees them as if typed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from tokenrace.cli.common import Options
from tokenrace.load.profiles import PROFILES, Profile, profile

F = TypeVar("F", bound=Callable[..., Any])
Defaults = dict[str, str | int | bool]  # option name -> value, as click would have parsed it

OPTION = click.option(
    "--profile",
    type=click.Choice(list(PROFILES)),
    help="Measure the way a public reference does: its workload and load as defaults (flags override), "
    "and its figures beside tokenrace's: aa, aa-1k, aa-100k, aa-parallel (Artificial Analysis), llmperf "
    "(LLMPerf leaderboard), endpoints (MLPerf Endpoints; a sweep). See docs/profiles.md.",
)


def profile_option(fn: F) -> F:
    return OPTION(fn)


def run_defaults(p: Profile) -> Defaults:
    """A profile's values under the names of bench's options (as click would have parsed them)."""
    values: dict[str, str | int | bool | None] = {
        "input_tokens": None if p.input_tokens is None else str(p.input_tokens),
        "output_tokens": None if p.output_tokens is None else str(p.output_tokens),
        "max_tokens": p.output_tokens,
        "requests": p.requests,
        "concurrency": p.concurrency,
        "cache_bust": p.cache_bust,
        "cold": p.cold,
    }
    return {k: v for k, v in values.items() if v is not None}


def sweep_defaults(p: Profile) -> Defaults:
    """A profile's values under the names of sweep's own options."""
    if p.concurrencies is None:
        return {}
    return {
        "concurrencies": ",".join(str(c) for c in p.concurrencies),
        "no_stop": True,  # every point is a point of the curve, saturated or not
        "offline": p.offline,
    }


def apply_profile(ctx: click.Context, o: Options, defaults: Callable[[Profile], Defaults]) -> Profile | None:
    """Write the chosen profile's defaults into `o` for every option not given on the command line;
    returns the profile (None without --profile)."""
    name = o.get("profile")
    if not name:
        return None
    p = profile(str(name))
    for key, value in defaults(p).items():
        if key in o and ctx.get_parameter_source(key) != click.core.ParameterSource.COMMANDLINE:
            o[key] = value
    return p
