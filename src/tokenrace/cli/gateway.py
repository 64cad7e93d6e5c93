"""`tokenrace gateway`: serve the OpenAI-compatible gateway; `tokenrace gateway check` validates a file."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from tokenrace.errors import UsageError


@click.group("gateway", invoke_without_command=True)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The gateway YAML file (see docs/gateway.md).",
)
@click.option("--host", help="Listen address (default: listen.host from the file).")
@click.option("--port", type=int, help="Listen port, 0 for a free one (default: listen.port from the file).")
@click.option("--cpu", type=int, multiple=True, help="Pin the process to this CPU core (repeatable).")
@click.pass_context
def command(
    ctx: click.Context, config_path: Path | None, host: str | None, port: int | None, cpu: tuple[int, ...]
) -> None:
    """Route OpenAI-compatible traffic to backends by model name, with canaries that roll back by themselves.

    Serves /v1/chat/completions, /v1/completions, /v1/models, /healthz, /metrics and /admin/state.
    SIGHUP reloads the file (in-flight requests finish on the old settings); SIGTERM drains.
    """
    if ctx.invoked_subcommand is not None:
        return
    if config_path is None:
        raise UsageError("tokenrace gateway needs --config FILE (or: tokenrace gateway check FILE)")
    # Canary statistics use numpy; its BLAS thread pool would only spin on the gateway's cores.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from tokenrace.gateway.app import from_file  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)
    from tokenrace.gateway.server import run  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)

    gw = from_file(config_path)
    if cpu:
        os.sched_setaffinity(0, set(cpu))
    logging.basicConfig(level=gw.runtime.config.log.level.upper(), format="%(message)s", stream=sys.stderr)

    def ready(url: str) -> None:
        click.echo(
            f"gateway at {url}/v1 ({len(gw.runtime.routes)} routes, {len(gw.runtime.backends)} backends); Ctrl-C drains and stops",
            err=True,
        )
        click.echo(f"READY {url}")  # one stdout line, for scripts

    run(gw, host, port, ready)


@command.command("check")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--no-env", is_flag=True, help="Do not require the environment variables the file names (e.g. in CI).")
@click.pass_context
def check(ctx: click.Context, path: Path, no_env: bool) -> None:
    """Validate a gateway file without starting: every problem, one line each, with its line number."""
    from tokenrace.gateway.config import ConfigError, load_config  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)

    try:
        config = load_config(path, check_env=not no_env)
    except ConfigError as err:
        for problem in err.problems:
            click.echo(problem, err=True)
        ctx.exit(2)
    click.echo(f"{path}: OK: {_summary(config)}")


def _summary(config: object) -> str:
    from tokenrace.gateway.config import GatewayConfig  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)

    assert isinstance(config, GatewayConfig)
    parts = [_count(len(config.backends), "backend"), _count(len(config.routes), "route")]
    for route in config.routes:
        for target in route.backends:
            if len(target.names) > 1 and target.policy != "least_in_flight":
                parts.append(f"{target.policy} pool on {route.model}: {', '.join(target.names)}")
        if route.canary is not None:
            ramp = " -> ".join(f"{s:g}%" for s in route.canary.steps)
            parts.append(f"canary on {route.model}: {route.canary.names[0]} {ramp}, hold {route.canary.hold_s:g} s")
    parts.append("client keys required" if config.auth.required else "no client keys (auth.required: false)")
    if config.telemetry.otel:
        parts.append("OpenTelemetry spans on")
    if config.state is not None:
        parts.append(f"state shared through Redis (${config.state.redis_url_env}, keys {config.state.key_prefix}:*)")
    return "; ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
