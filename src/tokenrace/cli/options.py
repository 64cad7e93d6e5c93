"""The options every measuring command shares (bench, sweep), and settings built from them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from tokenrace.cli.common import Options, parse_headers, parse_json_object, picked
from tokenrace.cli.workload_options import WorkloadOptions, apply_workload_options, workload_options
from tokenrace.client.providers import PROVIDERS, provider_api, resolve_endpoint
from tokenrace.client.request import API_NAMES, RequestOptions
from tokenrace.client.structured import read_schema, read_tools, tool_choice
from tokenrace.client.transport import Timeouts
from tokenrace.errors import InvalidInput, UsageError
from tokenrace.figures.cost import CostSpec, spec
from tokenrace.figures.efficiency import EfficiencySpec
from tokenrace.figures.slo import parse_slo
from tokenrace.load.runner import Load
from tokenrace.load.workers import WorkersSpec, parse_workers
from tokenrace.runs.settings import BenchSettings, PromptSpec
from tokenrace.units import parse_duration_s, parse_mean_std

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option(
        "--url", help="Base URL, e.g. http://localhost:8000/v1 (env OPENAI_BASE_URL). Omit to bench the embedded model."
    ),
    click.option("--api-key", help="API key (prefer an env var: OPENAI_API_KEY or the provider's)."),
    click.option("--provider", type=click.Choice(sorted(PROVIDERS)), help="Preset base URL and key variable."),
    click.option("--model", help="Model name; default: the first one the server lists."),
    click.option(
        "--api",
        type=click.Choice(API_NAMES),
        help="The API to call: chat (/chat/completions), completions, responses (/responses), messages "
        "(Anthropic /messages), embeddings, rerank [default: chat, or the provider's: messages for anthropic].",
    ),
    click.option(
        "--batch-size", type=int, help="embeddings: inputs per request, each --input-tokens long [default: 1]."
    ),
    click.option(
        "--documents", type=int, help="rerank: documents per request, each --input-tokens long [default: 10]."
    ),
    click.option(
        "--rerank-format",
        type=click.Choice(["cohere", "tei"]),
        help="rerank: cohere (POST /v1/rerank with query, documents, top_n; also Jina and vLLM) or tei "
        "(Hugging Face TEI: POST /rerank with query, texts) [default: cohere].",
    ),
    click.option("--stream/--no-stream", default=True, show_default=True),
    click.option(
        "--usage/--no-usage",
        "include_usage",
        default=True,
        show_default=True,
        help="Ask for stream_options.include_usage.",
    ),
    click.option("--max-tokens", type=int, default=256, show_default=True),
    click.option("--temperature", type=float),
    click.option(
        "--seed", type=int, default=0, show_default=True, help="Seed for prompts, arrivals and the request's seed."
    ),
    click.option(
        "--ignore-eos", is_flag=True, help="Send ignore_eos=true (vLLM, SGLang, llama.cpp) for exact output lengths."
    ),
    click.option("--extra-body", help="JSON object merged into every request body."),
    click.option(
        "--tools",
        "tools_file",
        type=click.Path(dir_okay=False),
        help="JSON file with an OpenAI tools list, sent with every request; tool calls are timed and counted.",
    ),
    click.option("--tool-choice", help="auto, none, required, or a tool's name (forces that function)."),
    click.option(
        "--response-format",
        "response_format_file",
        type=click.Path(dir_okay=False),
        help="JSON Schema file: ask for structured output (json_schema, strict) and validate every answer.",
    ),
    click.option(
        "--header",
        "headers",
        multiple=True,
        help="Extra header 'Name: value' (repeatable); 'Name: env:VAR' reads the value from $VAR. "
        "Values of secret-looking headers (authorization, cookie, *key*, *token*, *secret*) are never recorded.",
    ),
    click.option("--concurrency", type=int, default=1, show_default=True, help="Closed loop: requests in flight."),
    click.option("--rate", type=float, help="Open loop: requests per second (a slow server never delays a send)."),
    click.option(
        "--arrival", type=click.Choice(["poisson", "constant", "gamma"]), default="poisson", show_default=True
    ),
    click.option("--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape (1 = Poisson)."),
    click.option("--max-concurrency", type=int, help="Open loop: cap on requests in flight."),
    click.option("--requests", type=int, help="Measured requests (default 100 unless --duration)."),
    click.option("--duration", help="Stop sending after this long (90s, 5m)."),
    click.option(
        "--warmup", type=int, default=0, show_default=True, help="Warm-up requests, recorded but not in the statistics."
    ),
    click.option(
        "--keep-awake/--no-keep-awake",
        default=False,
        show_default=True,
        help="Keep the client's event loop polling (a busy core) so that a halted vCPU does not delay "
        "arrival stamps; off by default: on a shared machine the spin takes the CPU the server and the "
        "client's own work need.",
    ),
    click.option(
        "--cold/--no-cold",
        default=True,
        show_default=True,
        help="Send one request alone first and report it as the cold figures.",
    ),
    click.option("--prompt", help="One prompt text for every request."),
    click.option(
        "--prompts",
        "prompts_file",
        type=click.Path(dir_okay=False),
        help='JSONL: {"messages": [...]} or {"prompt": ...}, optional max_tokens.',
    ),
    click.option("--input-tokens", help="Synthetic prompts: MEAN[,STD] tokens."),
    click.option("--output-tokens", help="Output length: MEAN[,STD] tokens (sets max_tokens per request)."),
    click.option("--tokenizer", help="tokenizer.json, a .gguf, or 'server' (/tokenize) for counting tokens."),
    click.option(
        "--hardware",
        help="Device the server runs on (a `tokenrace plan` catalog name, or cpu): report % of the speed of light.",
    ),
    click.option("--model-config", help="Model for the bound: catalog name, config.json, model folder or .gguf."),
    click.option("--precision", help="Weights precision for the bound (bf16, fp8, int4, awq, q4_k_m, ...)."),
    click.option("--devices", type=int, help="Devices serving the model (tensor parallel size) for the bound."),
    click.option(
        "--monitor/--no-monitor",
        default=False,
        show_default=True,
        help="Sample GPU (NVML), system and the server's /metrics into timeseries.jsonl.",
    ),
    click.option("--monitor-interval", default="1s", show_default=True, help="Sampling interval (1s, 500ms)."),
    click.option(
        "--metrics-url",
        help="The server's Prometheus /metrics (default: http://host:port/metrics of --url, none for hosted APIs).",
    ),
    click.option(
        "--dcgm-url",
        help="A DCGM exporter's /metrics (e.g. http://gpu-host:9400/metrics): the GPUs' energy over the run, "
        "for a server on another machine (one on this machine is read through NVML).",
    ),
    click.option(
        "--content",
        type=click.Choice(["natural", "copy", "random", "all"]),
        help="What the model is asked to write, at the same prompt and output lengths: continue prose (natural), "
        "repeat a given passage (copy), write out a given random string (random), or all three interleaved.",
    ),
    click.option(
        "--slo",
        help="Goodput SLOs, ceilings on each request's ttft, tpot, e2e or itl (its largest chunk gap), "
        "e.g. ttft<=500ms,tpot<=50ms,e2e<=10s (ttft=500ms reads as ttft<=500ms).",
    ),
    click.option("--timeout-connect", type=float, default=10.0, show_default=True, help="Seconds."),
    click.option(
        "--timeout-first-byte",
        type=float,
        default=120.0,
        show_default=True,
        help="Seconds to the first byte of the answer.",
    ),
    click.option("--timeout-idle", type=float, default=60.0, show_default=True, help="Seconds between chunks."),
    click.option("--timeout-total", type=float, default=600.0, show_default=True, help="Seconds per request."),
    click.option(
        "--output",
        "-o",
        type=click.Path(file_okay=False, path_type=Path),
        help="Run directory (default runs/<UTC time>-<label>).",
    ),
    click.option("--label", help="A name for this run."),
    click.option(
        "--max-error-rate",
        type=float,
        help="Exit non-zero above this error rate (default: only if every request failed).",
    ),
    click.option(
        "--confidence",
        type=float,
        default=0.95,
        show_default=True,
        help="The confidence of every bound: which percentiles the requests can bound, and sweep --sla's verdicts.",
    ),
    click.option(
        "--workers",
        help="Send from N worker processes, or 'auto' (as many as the calibrated client needs); one scheduler keeps the load.",
    ),
    click.option(
        "--ray",
        help="Run the workers as Ray actors spread over a Ray cluster's nodes: 'auto' or the cluster's address.",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
]


def bench_options(fn: F) -> F:
    """Apply the shared options (in --help order), then the cost options."""
    for opt in reversed(_OPTIONS):
        fn = opt(fn)
    return cost_options(workload_options(fn))


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """The options `bench_options` declares, as click parsed them (defaults: click's). A command
    with more options of its own reads them apart (sweep's `SweepOptions`)."""

    url: str | None = None
    api_key: str | None = None
    provider: str | None = None
    model: str | None = None
    api: str | None = None
    batch_size: int | None = None
    documents: int | None = None
    rerank_format: str | None = None
    stream: bool = True
    include_usage: bool = True
    max_tokens: int = 256
    temperature: float | None = None
    seed: int = 0
    ignore_eos: bool = False
    extra_body: str | None = None
    tools_file: str | None = None
    tool_choice: str | None = None
    response_format_file: str | None = None
    headers: tuple[str, ...] = ()
    concurrency: int = 1
    rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    requests: int | None = None
    duration: str | None = None
    warmup: int = 0
    keep_awake: bool = False
    cold: bool = True
    prompt: str | None = None
    prompts_file: str | None = None
    input_tokens: str | None = None
    output_tokens: str | None = None
    tokenizer: str | None = None
    hardware: str | None = None
    model_config: str | None = None
    precision: str | None = None
    devices: int | None = None
    monitor: bool = False
    monitor_interval: str = "1s"
    metrics_url: str | None = None
    dcgm_url: str | None = None
    content: str | None = None
    slo: str | None = None
    timeout_connect: float = 10.0
    timeout_first_byte: float = 120.0
    timeout_idle: float = 60.0
    timeout_total: float = 600.0
    output: Path | None = None
    label: str | None = None
    max_error_rate: float | None = None
    confidence: float = 0.95
    workers: str | None = None
    ray: str | None = None
    as_json: bool = False
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    cost: CostOptions = field(default_factory=lambda: CostOptions())  # declared with the cost flags below
    quality_samples: int | None = None  # bench only: `bench_quality.OPTION`
    profile: str | None = None  # `cli.profiles.profile_option`; applied to the other options before they are read
    engine: str = "embedded"  # bench only: the engine started when there is no --url

    @classmethod
    def of(cls, o: Options) -> BenchOptions:
        """The typed options out of click's keyword arguments (names it does not declare are left)."""
        return dataclasses.replace(
            picked(cls, o, "workload", "cost"), workload=picked(WorkloadOptions, o), cost=picked(CostOptions, o)
        )


def settings_from_options(o: Options | BenchOptions) -> BenchSettings:
    opts = o if isinstance(o, BenchOptions) else BenchOptions.of(o)
    return apply_workload_options(_settings(opts), opts.workload, opts.requests, opts.duration)


def chosen_api(o: BenchOptions) -> str:
    """--api, else the provider preset's API, else chat."""
    return o.api or provider_api(o.provider) or "chat"


def _settings(o: BenchOptions) -> BenchSettings:
    api = chosen_api(o)
    if o.rerank_format is not None and api != "rerank":
        raise InvalidInput("rerank_format", f"chooses the rerank API's shape; the API is {api}")
    endpoint = resolve_endpoint(o.url, o.api_key, o.provider, api)
    extra = parse_json_object(o.extra_body, "--extra-body")
    if o.ignore_eos:
        extra.setdefault("ignore_eos", True)
    duration = parse_duration_s(o.duration, "--duration")
    requests = o.requests if o.requests is not None or duration else 100
    headers, env_headers = parse_headers(o.headers)
    tools = read_tools(o.tools_file) if o.tools_file else None
    choice = tool_choice(o.tool_choice, tools) if o.tool_choice else None
    schema_name, schema = read_schema(o.response_format_file) if o.response_format_file else ("answer", None)
    return BenchSettings(
        endpoint=endpoint,
        model=o.model,
        request=RequestOptions(
            api=api,
            rerank_format=o.rerank_format or "cohere",
            stream=o.stream,
            include_usage=o.include_usage,
            max_tokens=o.max_tokens,
            temperature=o.temperature,
            seed=o.seed,
            extra_body=extra,
            extra_headers=headers,
            tools=tools,
            tool_choice=choice,
            response_schema=schema,
            response_schema_name=schema_name,
        ),
        timeouts=Timeouts(o.timeout_connect, o.timeout_first_byte, o.timeout_idle, o.timeout_total),
        load=Load(
            concurrency=o.concurrency,
            rate=o.rate,
            arrival=o.arrival,
            burstiness=o.burstiness,
            max_concurrency=o.max_concurrency,
            requests=requests,
            duration_s=duration,
            warmup=o.warmup,
            cold=o.cold,
            seed=o.seed,
            keep_awake=o.keep_awake,
        ),
        prompts=PromptSpec(
            text=o.prompt,
            file=o.prompts_file,
            input_tokens=parse_mean_std(o.input_tokens, "--input-tokens"),
            output_tokens=parse_mean_std(o.output_tokens, "--output-tokens"),
            content=o.content,
            batch_size=o.batch_size,
            documents=o.documents,
        ),
        tokenizer=o.tokenizer,
        slo=parse_slo(o.slo),
        output=o.output,
        label=o.label,
        max_error_rate=o.max_error_rate,
        confidence=o.confidence,
        efficiency=_efficiency_spec(o),
        cost=o.cost.spec(),
        monitor=o.monitor,
        monitor_interval_s=parse_duration_s(o.monitor_interval, "--monitor-interval"),
        metrics_url=o.metrics_url,
        dcgm_url=o.dcgm_url,
        workers=_workers_spec(o.workers, o.ray),
        secret_headers=env_headers,
    )


def embedded_serves(api: str) -> bool:
    """Whether the embedded engine must serve embeddings for this run (llama-server --embeddings);
    refuses an API it cannot serve."""
    if api == "rerank":
        raise InvalidInput(
            "api", "rerank needs a reranking model and the embedded engine serves a chat model: give --url"
        )
    return api == "embeddings"


def _workers_spec(workers: str | None, ray: str | None) -> WorkersSpec | None:
    """--workers N|auto and --ray auto|ADDRESS; None: this process sends."""
    if workers is None and ray is None:
        return None
    return WorkersSpec(parse_workers(workers), ray)


def _efficiency_spec(o: BenchOptions) -> EfficiencySpec | None:
    hardware, model = o.hardware, o.model_config
    if not hardware and not model:
        return None
    if not hardware or not model:
        raise UsageError("--hardware and --model-config go together (the bound needs both)")
    return EfficiencySpec(hardware, model, o.precision, o.devices)


# --- cost flags ---------------------------------------------------------------------------------

_COST_OPTIONS = [
    click.option(
        "--price",
        help="Hosted API price in $ per million tokens, e.g. in=0.59,out=0.79 "
        "(default: the price table, for a preset provider's model).",
    ),
    click.option(
        "--gpu-hour-cost",
        type=float,
        help="Self-hosted: $ per GPU-hour; cost per token follows from the measured throughput.",
    ),
    click.option("--gpus", type=int, help="GPUs behind the endpoint, with --gpu-hour-cost [default: 1]."),
]


def cost_options(fn: F) -> F:
    """--price, --gpu-hour-cost, --gpus; read them back with `spec_from_options(o)`."""
    for opt in reversed(_COST_OPTIONS):
        fn = opt(fn)
    return fn


@dataclass(frozen=True, slots=True)
class CostOptions:
    price: str | None = None
    gpu_hour_cost: float | None = None
    gpus: int | None = None

    def spec(self) -> CostSpec | None:
        return spec(self.price, self.gpu_hour_cost, self.gpus)


def spec_from_options(o: Options) -> CostSpec | None:
    """The cost of click's --price, --gpu-hour-cost and --gpus (for commands that take only those)."""
    return picked(CostOptions, o).spec()


# --- a subset, for a command that measures its own way (mlperf) ----------------------------------


def _name_of(opt: Callable[[Any], Any]) -> str | None:
    """The parameter name a shared option declares (applied to a throwaway function to read it)."""

    def probe() -> None: ...

    opt(probe)
    params: list[click.Parameter] = getattr(probe, "__click_params__", [])
    return params[-1].name if params else None


def options_named(*names: str) -> Callable[[F], F]:
    """Only the shared options called `names`, as bench has them (same flags, help and defaults).
    Read the result back with `settings_from_some(o)`."""
    chosen = [opt for opt in _OPTIONS if _name_of(opt) in names]
    assert len(chosen) == len(names), f"no shared option for {set(names) - {_name_of(o) for o in _OPTIONS}}"

    def apply(fn: F) -> F:
        for opt in reversed(chosen):
            fn = opt(fn)
        return fn

    return apply


def settings_from_some(o: Options) -> BenchSettings:
    """Settings from a command that takes some of the shared options: the others at bench's defaults
    (`BenchOptions` holds click's defaults)."""
    return settings_from_options(o)
