"""`tokenrace claim`: test a speed claim against an endpoint within a time budget, and give a verdict."""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from rich.console import Console

from tokenrace.aio import run as run_async
from tokenrace.claim.battery import Battery, ClaimSettings, Notify
from tokenrace.claim.models import ClaimFile, read_claim
from tokenrace.cli.common import echo_json, parse_headers, parse_json_object, wide_console
from tokenrace.cli.profiles import apply_profile, profile_option
from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import PROVIDERS, ResolvedEndpoint, resolve_endpoint
from tokenrace.errors import InvalidInput
from tokenrace.figures.cost import Price, lookup
from tokenrace.figures.objectives import parse_objectives
from tokenrace.load.progress import LiveProgress
from tokenrace.load.runner import Load
from tokenrace.report.claim import claim_view, plan_table, write_claim_report
from tokenrace.runs.settings import BenchSettings
from tokenrace.serve.embedded import EmbeddedOptions
from tokenrace.serve.launch import start_embedded
from tokenrace.sweep.profile import embedded_settings
from tokenrace.sweep.runner import ProgressFor
from tokenrace.table import to_rich
from tokenrace.units import parse_duration_s, parse_price_per_m

EMBEDDED_SLOTS = 8
EMBEDDED_CTX_PER_SLOT = 1024


@dataclass(frozen=True, slots=True)
class ClaimOptions:
    """The command's options, as click names them."""

    url: str | None
    api_key: str | None
    provider: str | None
    model: str | None
    expect: str
    budget: str
    max_requests: int | None
    max_cost: float | None
    price: str | None
    context: int | None
    max_concurrency: int
    max_prompt_tokens: int
    max_error_rate: float
    confidence: float
    quality_samples: int | None
    api: str
    max_tokens: int
    ignore_eos: bool
    temperature: float | None
    seed: int
    headers: tuple[str, ...]
    extra_body: str | None
    output: Path | None
    label: str | None
    yes: bool
    as_json: bool
    profile: str | None = None


@click.command("claim")
@click.option("--url", help="Base URL, e.g. http://localhost:8000/v1. Omit to test the embedded model.")
@click.option("--api-key", help="API key (prefer an env var: OPENAI_API_KEY or the provider's).")
@click.option("--provider", type=click.Choice(sorted(PROVIDERS)), help="Preset base URL and key variable.")
@click.option("--model", help="Model name; default: the first one the server lists.")
@click.option(
    "--expect",
    required=True,
    help="What the claim says, e.g. 'output_tok_s_per_user>=150,ttft_p50<=200ms' (figures: docs/claim.md).",
)
@click.option("--budget", default="10m", show_default=True, help="Time for the whole battery (90s, 10m).")
@click.option("--max-requests", type=int, help="Send at most this many requests (hosted APIs).")
@click.option("--max-cost", type=float, help="Spend at most this many dollars (needs a known price or --price).")
@click.option("--price", help="$ per million tokens, e.g. in=0.59,out=0.79 (default: the price table).")
@click.option("--context", type=int, help="The model's context in tokens, when the server does not say.")
@click.option("--max-concurrency", type=int, default=64, show_default=True, help="The highest concurrency tried.")
@click.option("--max-prompt-tokens", type=int, default=32768, show_default=True, help="The longest prompt tried.")
@click.option("--max-error-rate", type=float, default=0.05, show_default=True, help="A condition fails above it.")
@click.option(
    "--confidence",
    type=float,
    default=0.95,
    show_default=True,
    help="Each verdict's confidence; a condition's checks split it between their looks (docs/claim.md).",
)
@click.option("--quality-samples", type=int, help="Also a quality pass: N items of each built-in suite.")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True)
@click.option("--max-tokens", type=int, default=128, show_default=True, help="Output tokens per request.")
@click.option("--ignore-eos", is_flag=True, help="Send ignore_eos=true for exact output lengths.")
@click.option("--temperature", type=float)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--header", "headers", multiple=True, help="Extra header 'Name: value' (repeatable).")
@click.option("--extra-body", help="JSON object merged into every request body.")
@click.option("--output", "-o", type=click.Path(file_okay=False, path_type=Path), help="The claim's directory.")
@click.option("--label", help="A name for this claim.")
@click.option("--yes", is_flag=True, help="Send without asking (required for a hosted API without a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print claim.json.")
@profile_option
def command(**o: Any) -> None:
    """Test a claim ("serves 150 tokens/s per user, first token under 200 ms") and give a verdict:
    holds, holds only under (the limits), fails, or unproven (not enough evidence, and what would
    decide it), with the figures behind it.

    Runs the battery within --budget: a cold request and warm ones, the highest concurrency at which
    every expectation holds, prompts from short to long, busted against shared prefixes, drift at the
    end, and optionally a quality pass. Writes claim.json and report.html beside one run directory per
    step. Without --url it tests the embedded model.
    """
    # A profile sets the output length; every step's summary adds the figures of its reference.
    apply_profile(click.get_current_context(), o, lambda p: {"max_tokens": p.output_tokens} if p.output_tokens else {})
    opts = ClaimOptions(**o)
    settings, cs = _settings(opts)
    if settings.endpoint is None:
        cs.validate()  # bad input is reported before the engine takes its seconds to start
        claim = _embedded(cs, opts)
    else:
        battery = Battery(cs, _progress_for(opts), _notify(opts), sys.argv)
        _confirm(battery, settings.endpoint, opts.yes, opts.as_json)
        claim = _run(battery)
    _report(claim, opts.as_json)


def _settings(o: ClaimOptions) -> tuple[BenchSettings, ClaimSettings]:
    expectations = parse_objectives(o.expect, "expect")
    budget = parse_duration_s(o.budget, "--budget") or 0.0
    endpoint = resolve_endpoint(o.url, o.api_key, o.provider)
    extra = parse_json_object(o.extra_body, "--extra-body")
    if o.ignore_eos:
        extra.setdefault("ignore_eos", True)
    headers, env_headers = parse_headers(o.headers)
    if o.max_tokens < 1:
        raise InvalidInput("max_tokens", f"must be at least 1, got {o.max_tokens}")
    if any(e.figure == "goodput" for e in expectations):
        raise InvalidInput("expect", "goodput needs per-request SLOs; state the limit itself (e.g. ttft_p95<=500ms)")
    settings = BenchSettings(
        endpoint=endpoint,
        model=o.model,
        request=RequestOptions(
            api=o.api,
            max_tokens=o.max_tokens,
            temperature=o.temperature,
            seed=o.seed,
            extra_body=extra,
            extra_headers=headers,
        ),
        load=Load(seed=o.seed, requests=1),
        output=o.output,
        label=o.label or "claim",
        confidence=o.confidence,
        secret_headers=env_headers,
        profile=o.profile,
    )
    price = Price(*parse_price_per_m(o.price)) if o.price else lookup(endpoint.provider if endpoint else None, o.model)
    cs = ClaimSettings(
        template=settings,
        expectations=expectations,
        budget_s=budget,
        max_requests=o.max_requests,
        max_cost_usd=o.max_cost,
        price=price,
        context_tokens=o.context,
        quality_samples=o.quality_samples,
        max_concurrency=o.max_concurrency,
        max_prompt_tokens=o.max_prompt_tokens,
        max_error_rate=o.max_error_rate,
        confidence=o.confidence,
    )
    if cs.quality_samples is not None and cs.quality_samples < 1:
        raise InvalidInput("quality_samples", f"must be at least 1, got {cs.quality_samples}")
    for name, value in (("max_concurrency", o.max_concurrency), ("max_prompt_tokens", o.max_prompt_tokens)):
        if value < 1:
            raise InvalidInput(name, f"must be at least 1, got {value}")
    return settings, cs


def hosted(endpoint: ResolvedEndpoint) -> bool:
    """A preset provider, or a host that is not this machine: requests there may cost money."""
    if endpoint.provider in PROVIDERS:
        return True
    host = urlsplit(endpoint.base_url).hostname or ""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def _confirm(battery: Battery, endpoint: ResolvedEndpoint, yes: bool, as_json: bool) -> None:
    """Show the plan before anything is sent; a hosted API needs a yes (the flag, or typed)."""
    console = Console(stderr=True)
    if not as_json or not yes:
        console.print(to_rich(plan_table(battery.claim)))
    if yes or not hosted(endpoint):
        return
    if not sys.stdin.isatty():
        raise InvalidInput("yes", f"required without a terminal: the plan above would be sent to {endpoint.base_url}")
    if not click.confirm("send these requests?", default=False, err=True):
        raise click.exceptions.Abort


def _run(battery: Battery) -> ClaimFile:
    try:
        return run_async(battery.run())
    except KeyboardInterrupt:
        return _partial(battery)


def _partial(battery: Battery) -> ClaimFile:
    # The battery wrote claim.json with a partial verdict before the interrupt surfaced.
    claim = read_claim(battery.directory)
    claim.partial = True
    return claim


def _embedded(cs: ClaimSettings, o: ClaimOptions) -> ClaimFile:

    model = str(o.model) if o.model and str(o.model).endswith(".gguf") else None
    cs.template.model = None
    # One llama-server slot per request in flight, each with its share of the context.
    cs.max_concurrency = min(cs.max_concurrency, EMBEDDED_SLOTS)
    cs.context_tokens = cs.context_tokens or EMBEDDED_CTX_PER_SLOT
    click.echo(f"starting the embedded model (llama-server, {EMBEDDED_SLOTS} parallel slots)...", err=True)
    holder: dict[str, Battery] = {}

    async def go() -> ClaimFile:
        opts = EmbeddedOptions(
            model=Path(model) if model else None,
            parallel=EMBEDDED_SLOTS,
            ctx_size=EMBEDDED_CTX_PER_SLOT * EMBEDDED_SLOTS,
        )
        engine = await start_embedded(opts)
        try:
            cs.template = embedded_settings(engine, cs.template)
            battery = Battery(cs, _progress_for(o), _notify(o), sys.argv)
            holder["battery"] = battery
            if not o.as_json:
                Console(stderr=True).print(to_rich(plan_table(battery.claim)))
            return await battery.run()
        finally:
            engine.stop()

    try:
        return run_async(go())
    except KeyboardInterrupt:
        if "battery" not in holder:
            raise
        return _partial(holder["battery"])


def _progress_for(o: ClaimOptions) -> ProgressFor:
    def make(name: str, load: Load) -> LiveProgress:
        return LiveProgress(load.requests, enabled=not o.as_json)

    return make


def _notify(o: ClaimOptions) -> Notify:
    def say(line: str) -> None:
        if not o.as_json:
            click.echo(line, err=True)

    return say


def _report(claim: ClaimFile, as_json: bool) -> None:
    directory = Path(claim.directory) if claim.directory else None
    report = write_claim_report(directory, directory / "report.html") if directory is not None else None
    if as_json:
        echo_json(claim.model_dump(mode="json"))
    else:
        wide_console().print(claim_view(claim))
        click.echo(f"claim directory: {directory}")
        if report is not None:
            click.echo(f"report: {report}")
    if claim.partial:
        click.echo("interrupted: the finished conditions and a partial verdict are saved", err=True)
        sys.exit(130)
