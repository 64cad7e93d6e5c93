"""bench's and sweep's typed options match the flags click declares: every flag has a field, with the
flag's default, so reading click's values into them can neither drop a flag nor invent a default."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
import pytest

from tokenrace.cli.bench import command as bench
from tokenrace.cli.options import BenchOptions, CostOptions, settings_from_options
from tokenrace.cli.sweep import SweepOptions
from tokenrace.cli.sweep import command as sweep
from tokenrace.cli.workload_options import WorkloadOptions
from tokenrace.errors import InvalidInput


def _fields(*classes: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.name not in ("workload", "cost"):
                out[f.name] = f.default
    return out


@pytest.mark.parametrize(("command", "extra"), [(bench, ()), (sweep, (SweepOptions,))])
def test_every_flag_has_a_typed_field_with_its_default(command: click.Command, extra: tuple[type, ...]) -> None:
    fields = _fields(BenchOptions, WorkloadOptions, CostOptions, *extra)
    given = command.make_context(command.name or "", []).params  # every flag at its default
    assert given and set(given) <= set(fields), f"flags without a field: {set(given) - set(fields)}"
    for name, value in given.items():
        assert fields[name] == value, name


def test_click_values_read_into_settings() -> None:
    ctx = bench.make_context("bench", ["--url", "http://127.0.0.1:9/v1", "--slo", "ttft=500ms", "--duration", "2m"])
    settings = settings_from_options(ctx.params)
    assert settings.load.duration_s == 120 and settings.load.requests is None
    assert settings.slo is not None and [(o.figure, o.op, o.limit) for o in settings.slo] == [("ttft", "<=", 500)]
    assert settings.saved().slo == {"ttft_ms": 500}  # manifest.json's shape, as before
    ctx = bench.make_context("bench", ["--url", "http://127.0.0.1:9/v1", "--slo", "ttft_p99<=500ms"])
    with pytest.raises(InvalidInput, match="slo: 'ttft_p99<=500ms': an SLO is a ceiling on one request's"):
        settings_from_options(ctx.params)
