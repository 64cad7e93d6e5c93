"""Cost beside speed: API prices, GPU-hours at the measured throughput, the price table."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from tests.conftest import in_process
from tests.sweep.helpers import bench

from tokenrace.cli.options import cost_options, spec_from_options
from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.errors import InvalidInput, UsageError
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.figures.cost import (
    CostSpec,
    GpuCost,
    Price,
    api_cost,
    cost_of,
    gpu_cost,
    lookup,
    spec,
)
from tokenrace.load.runner import Load
from tokenrace.model.summary import Cost, Summary
from tokenrace.runs.settings import BenchSettings
from tokenrace.sweep.runner import SweepPlan, run_sweep
from tokenrace.units import parse_price_per_m


def summary(
    ok: int = 100, prompt: float = 500.0, output: float = 200.0, tok_s: float | None = 1000.0, req_s: float | None = 5.0
) -> Summary:
    return Summary.model_validate(
        {
            "requests": {"total": ok, "succeeded": ok, "failed": 0},
            "metrics": {
                "prompt_tokens": {"count": ok, "mean": prompt},
                "output_tokens": {"count": ok, "mean": output},
            },
            "throughput": {"output_tokens_per_s": tok_s, "requests_per_s": req_s},
        }
    )


def test_parse_price_and_flags() -> None:
    assert parse_price_per_m("in=0.59,out=0.79") == (0.59, 0.79)
    assert parse_price_per_m(" out=2 , in=1 ") == (1.0, 2.0)
    for bad in ("0.59,0.79", "in=0.5", "in=x,out=1", "in=-1,out=1", "in=1,out=1,cached=0.1"):
        with pytest.raises(InvalidInput, match="expected in=X,out=Y") as err:
            parse_price_per_m(bad)
        assert err.value.param == "price"
    with pytest.raises(InvalidInput, match="give one"):
        spec("in=1,out=1", 2.5, None)
    with pytest.raises(InvalidInput, match="give that cost too") as err:
        spec(None, None, 2)
    assert err.value.param == "gpus"
    assert spec(None, 2.5, None) == CostSpec(gpu=GpuCost(2.5, 1))
    assert spec(None, None, None) is None


def test_api_cost_is_exact() -> None:
    c = api_cost(summary(), Price(0.59, 0.79))
    # 100 x (500 x 0.59 + 200 x 0.79) / 1e6 = 0.0453 $
    assert c.usd_total == pytest.approx(0.0453)
    assert c.usd_per_million_output_tokens == pytest.approx(0.0453 / 20000 * 1e6)
    assert c.usd_per_1k_requests == pytest.approx(0.453)


def test_gpu_cost_follows_throughput() -> None:
    c = gpu_cost(summary(), GpuCost(2.50, 2))
    assert c.usd_per_hour == 5.0
    assert c.usd_per_million_output_tokens == pytest.approx(5.0 / 3.6)  # 3.6 M tokens per hour
    assert c.usd_per_1k_requests == pytest.approx(5.0 / 18)
    undefined = gpu_cost(summary(tok_s=None, req_s=None), GpuCost(2.5))
    assert undefined.usd_per_million_output_tokens is None and undefined.usd_per_1k_requests is None


def test_price_table_lookup_and_user_override(tokenrace_home: Path) -> None:
    p = lookup("groq", "Llama-3.3-70B-Versatile")
    assert (
        p is not None and (p.input_per_m, p.output_per_m) == (0.59, 0.79) and p.date and p.source.startswith("https://")
    )
    assert lookup("groq", "no-such-model") is None and lookup(None, "gpt-4o") is None
    tokenrace_home.mkdir(parents=True)
    (tokenrace_home / "prices.toml").write_text(
        '[[price]]\nprovider = "groq"\nmodel = "llama-3.3-70b-versatile"\ninput = 0.5\noutput = 0.7\ndate = "2030-01"\n'
    )
    assert lookup("groq", "llama-3.3-70b-versatile") == Price(0.5, 0.7, "price table", "2030-01")
    (tokenrace_home / "prices.toml").write_text("[[price]]\nprovider = 1\n")
    with pytest.raises(UsageError, match="prices.toml"):
        lookup("groq", "x")


def test_cost_of_prefers_flags_then_saved_then_table() -> None:
    groq = ("groq", "llama-3.1-8b-instant")
    assert cost_of(summary(), *groq, None).price.input_per_m == 0.05
    assert cost_of(summary(), *groq, CostSpec(gpu=GpuCost(1.0))).basis == "gpu"
    saved = summary().model_copy(update={"cost": Cost(basis="api", usd_per_million_output_tokens=9.0)})
    assert cost_of(saved, *groq, None).usd_per_million_output_tokens == 9.0
    assert cost_of(summary(), "vllm", "x", None) is None


def test_cost_options_decorator() -> None:
    seen: dict[str, Any] = {}

    @click.command()
    @cost_options
    def cmd(**o: Any) -> None:
        seen["spec"] = spec_from_options(o)

    assert CliRunner().invoke(cmd, ["--gpu-hour-cost", "2.5", "--gpus", "2"]).exit_code == 0
    assert seen["spec"] == CostSpec(gpu=GpuCost(2.5, 2))


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServerThread]:
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8}) as srv:
        yield srv


def test_cost_in_show_compare_and_sweep(
    server: FakeServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = bench(server.base_url, tmp_path / "a").directory
    b = bench(server.base_url, tmp_path / "b", concurrency=2).directory
    p = in_process(capsys, "show", str(a), "--price", "in=0.59,out=0.79")
    assert p.returncode == 0, p.stderr
    assert "per million output tokens" in p.stdout and "$0.590 in / $0.790 out" in p.stdout
    p = in_process(capsys, "compare", str(a), str(b), "--gpu-hour-cost", "2.5", "--gpus", "2", "--markdown")
    assert "| cost per million output tokens | $ | $" in p.stdout and "| cost per 1k requests | $ | $" in p.stdout
    s = BenchSettings(
        endpoint=ResolvedEndpoint(server.base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=8),
        load=Load(requests=8),
        output=tmp_path / "s",
    )
    r = asyncio.run(run_sweep(s, SweepPlan(values=(1, 2), stop_early=False), cost=CostSpec(gpu=GpuCost(2.0))))
    assert all(row.cost and (row.cost.usd_per_million_output_tokens or 0) > 0 for row in r.sweep.steps)
    p = in_process(capsys, "show", str(tmp_path / "s"), "--gpu-hour-cost", "2")
    assert "$/M out tok" in p.stdout
