"""Write docs/cli.md from every command's --help (run after changing a command's options)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tokenrace.cli import cli


def main() -> None:
    runner = CliRunner()
    out = [
        "# Command line",
        "",
        "Generated from `--help` by `python scripts/gen_cli_docs.py`; do not edit by hand.",
        "",
    ]
    out += [
        "## tokenrace",
        "",
        "```",
        runner.invoke(cli, ["--help"], prog_name="tokenrace", terminal_width=100).output.rstrip(),
        "```",
        "",
    ]
    for name in cli.list_commands(None):  # type: ignore[arg-type]
        cmd = cli.get_command(None, name)  # type: ignore[arg-type]
        sub = getattr(cmd, "commands", None) or {}
        for args in [[name]] + [[name, s] for s in sub]:
            text = runner.invoke(cli, [*args, "--help"], prog_name="tokenrace", terminal_width=100).output.rstrip()
            out += [f"## tokenrace {' '.join(args)}", "", "```", text, "```", ""]
    Path(__file__).resolve().parent.parent.joinpath("docs", "cli.md").write_text("\n".join(out))


if __name__ == "__main__":
    main()
