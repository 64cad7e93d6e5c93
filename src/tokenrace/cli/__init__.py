"""The command-line edge: one module per command, loaded lazily so that `--help` stays fast.

Each module in COMMANDS defines a click command called `command`. A command module parses flags,
calls the core and lets TokenraceError through; `main` maps it to one line on stderr and an exit code.
An InvalidInput names the core's input (a settings field); `main` words it as the flag that sets it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from tokenrace import __version__
from tokenrace.errors import InvalidInput, TokenraceError

COMMANDS: dict[str, str] = {
    "bench": "tokenrace.cli.bench",
    "serve": "tokenrace.cli.serve",
    "plan": "tokenrace.cli.plan",
    "doctor": "tokenrace.cli.doctor",
    "monitor": "tokenrace.cli.monitor",
    "sweep": "tokenrace.cli.sweep",
    "runs": "tokenrace.cli.runs",
    "show": "tokenrace.cli.show",
    "compare": "tokenrace.cli.compare",
    "export": "tokenrace.cli.export",
    "report": "tokenrace.cli.report",
    "gateway": "tokenrace.cli.gateway",
    "quality": "tokenrace.cli.quality",
    "calibrate": "tokenrace.cli.calibrate",
    "claim": "tokenrace.cli.claim",
    "watch": "tokenrace.cli.watch",
    "mlperf": "tokenrace.cli.mlperf",
}


def _available() -> list[str]:
    return [name for name, mod in COMMANDS.items() if importlib.util.find_spec(mod) is not None]


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return _available()

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or importlib.util.find_spec(COMMANDS[name]) is None:
            return None
        command: click.Command = importlib.import_module(COMMANDS[name]).command
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="tokenrace")
def cli() -> None:
    """Measure LLM inference backends honestly, plan hardware, and route traffic between them."""


def flag_for(param: str) -> str:
    """The command-line flag that sets the core's input `param` (`max_concurrency` -> `--max-concurrency`).

    The core names an input as the flag does, in snake case; a test checks that every name the core
    raises has its flag."""
    return "--" + param.replace("_", "-")


def error_line(err: TokenraceError) -> str:
    if isinstance(err, InvalidInput):
        return f"{flag_for(err.param)}: {err.problem}"
    return str(err)


def main(argv: list[str] | None = None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="tokenrace", standalone_mode=False)
        # Without standalone mode click returns, rather than raises, a ctx.exit(n) code.
        if isinstance(rv, int) and rv != 0:
            sys.exit(rv)
    except TokenraceError as err:
        click.echo(f"error: {error_line(err)}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
