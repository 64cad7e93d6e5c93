"""`tokenrace gateway`: serve the OpenAI-compatible gateway; `tokenrace gateway check` validates a file."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path

import click

from tokenrace.errors import UsageError

# What the gateway extra installs, by import name: the HTTP parser, the shared state's client, and
# the precise prefix routing's KV event stream, its batches and the chat templates.
EXTRA_MODULES = ("httptools", "redis", "zmq", "msgpack", "jinja2")


def require_gateway_extra() -> None:
    """One line saying what to install when `pip install tokenrace` came without the gateway extra."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"tokenrace gateway needs the gateway extra (missing: {', '.join(missing)}): pip install 'tokenrace[gateway]'"
        )


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
@click.option(
    "--workers",
    default="1",
    show_default=True,
    help="Processes serving the one port (SO_REUSEPORT) under a supervisor: a number, or 'auto' (one per core).",
)
@click.option("--force", is_flag=True, help="Allow more --workers than the cores this process may use.")
@click.pass_context
def command(
    ctx: click.Context,
    config_path: Path | None,
    host: str | None,
    port: int | None,
    cpu: tuple[int, ...],
    workers: str,
    force: bool,
) -> None:
    """Route OpenAI-compatible traffic to backends by model name, with canaries that roll back by themselves.

    Serves /v1/chat/completions, /v1/completions, /v1/models, /healthz, /metrics and /admin/state.
    SIGHUP reloads the file (in-flight requests finish on the old settings); SIGTERM drains.
    """
    require_gateway_extra()
    if ctx.invoked_subcommand is not None:
        return
    if config_path is None:
        raise UsageError("tokenrace gateway needs --config FILE (or: tokenrace gateway check FILE)")
    from tokenrace.gateway.supervisor import worker_count  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)

    if cpu:
        os.sched_setaffinity(0, set(cpu))  # before counting the cores: the workers inherit it
    count = worker_count(workers, force)
    # Canary statistics use numpy; its BLAS thread pool would only spin on the gateway's cores.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from tokenrace.gateway.workers import RUN_DIR_ENV  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)

    if os.environ.get(RUN_DIR_ENV):
        _serve_as_worker(config_path, host, port)
    elif count > 1:
        _supervise(config_path, host, port, count)
    else:
        _serve(config_path, host, port)


def _serve(config_path: Path, host: str | None, port: int | None) -> None:
    from tokenrace.gateway.app import from_file  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)
    from tokenrace.gateway.server import run  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)

    gw = from_file(config_path)
    logging.basicConfig(level=gw.runtime.config.log.level.upper(), format="%(message)s", stream=sys.stderr)

    def ready(url: str) -> None:
        click.echo(
            f"gateway at {url}/v1 ({len(gw.runtime.routes)} routes, {len(gw.runtime.backends)} backends); Ctrl-C drains and stops",
            err=True,
        )
        click.echo(f"READY {url}")  # one stdout line, for scripts

    run(gw, host, port, ready)


def _serve_as_worker(config_path: Path, host: str | None, port: int | None) -> None:
    """One of several workers the supervisor started (its environment says which)."""
    from tokenrace.gateway.server import run  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)
    from tokenrace.gateway.supervisor import KILL_MARGIN_S  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)
    from tokenrace.gateway.workers import Worker, exit_when_orphaned, worker_gateway  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)

    gw = worker_gateway(config_path, os.environ)
    worker = Worker.from_env(gw, os.environ)
    assert worker is not None
    exit_when_orphaned(gw.runtime.config.drain_s + KILL_MARGIN_S)
    logging.basicConfig(level=gw.runtime.config.log.level.upper(), format="%(message)s", stream=sys.stderr)
    run(gw, host, port, lambda url: click.echo(f"READY {url}"), wrap=worker.wrap)


def _supervise(config_path: Path, host: str | None, port: int | None, count: int) -> None:
    from tokenrace.gateway import supervisor  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)
    from tokenrace.gateway.config import load_config, resolve_secrets  # noqa: PLC0415 - the gateway's modules load after `command` sets OPENBLAS_NUM_THREADS (numpy reads it once, when it loads)

    config = load_config(config_path)
    resolve_secrets(config, os.environ)  # a missing key stops here, before any worker starts
    logging.basicConfig(level=config.log.level.upper(), format="%(message)s", stream=sys.stderr)

    def ready(url: str) -> None:
        click.echo(
            f"gateway at {url}/v1 ({count} workers, {len(config.routes)} routes, {len(config.backends)} backends); "
            "Ctrl-C drains and stops",
            err=True,
        )
        click.echo(f"READY {url}")

    try:
        supervisor.run(config_path, config, count, host, port, ready)
    except RuntimeError as err:  # a worker or the state could not start: said in one line, not a trace
        click.echo(f"error: {err}", err=True)
        sys.exit(1)


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
