"""The inference engines tokenrace knows, in one catalog.

Each entry says how to reach the engine (default port, the variable its key is read from), how to
start it (`tokenrace serve`: the program and the flag for each setting), what its Prometheus
`/metrics` names are (monitor, the engine clock, the prefix cache), and how doctor finds it (Python
package, version endpoint). serve, monitor, doctor, figures and the client's presets read this
module; it imports nothing from tokenrace, so any package may use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit, urlunsplit


@dataclass(frozen=True, slots=True)
class Metrics:
    """An engine's Prometheus names, mapped onto the fields tokenrace reports."""

    prefix: str  # how to recognise the engine from its metric names
    gauges: dict[str, tuple[str, ...]]  # field -> sample names, first present wins
    counters: dict[str, str]  # field stem -> cumulative counter sample name
    # "ttft_s"/"tpot_s" -> histogram names, newest first: the first with observations wins
    histograms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The prefix cache: (queried, hit) prompt-token counter pairs, newest name first, or a hit-rate gauge.
    cache_counters: tuple[tuple[str, str], ...] = ()
    cache_gauge: str | None = None
    speculative: SpecNames | None = None  # speculative decoding's counters (or gauges), when the engine has them


@dataclass(frozen=True, slots=True)
class SpecNames:
    """Where an engine counts speculative decoding.

    Counters (vLLM, llama.cpp): the sample names of drafts (verification steps), draft tokens
    proposed, draft tokens accepted, and accepted tokens per draft position (one series per
    `position` label). Gauges (SGLang): its own running acceptance rate and accept length (accepted
    draft tokens + 1 per step), which can only be read at the end of a run, not as a delta.
    """

    drafts: str | None = None
    draft_tokens: str | None = None
    accepted_tokens: str | None = None
    accepted_per_position: str | None = None
    rate_gauge: str | None = None
    accept_length_gauge: str | None = None


@dataclass(frozen=True, slots=True)
class Launch:
    """How `tokenrace serve` starts the engine: its program and the flag for each launch setting.

    `program` may hold `{python}` (this interpreter) or `{llama_server}` (the binary found here);
    `model` is the flag before the model, or None when the model is the first argument. A setting
    whose flag is None has no such flag in this engine.
    """

    program: tuple[str, ...]
    model: str | None
    host: str = "--host"
    port: str = "--port"
    tensor_parallel_size: str | None = None
    max_model_len: str | None = None
    gpu_memory_utilization: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    max_num_seqs: str | None = None
    always: tuple[str, ...] = ()  # flags every launch gets (e.g. turning /metrics on)
    installed_as: tuple[Literal["command", "module", "binary"], str] = ("command", "")
    install: str = ""


@dataclass(frozen=True, slots=True)
class Engine:
    name: str  # the catalog key: what --engine, --provider and the monitor call it
    label: str  # as written for people
    aliases: tuple[str, ...] = ()  # other names for it: a server header, an `owned_by`, a doctor label
    default_port: int | None = None
    key_env: str | None = None  # the variable holding the key its server was started with
    package: str | None = None  # the Python distribution that provides it (doctor lists its version)
    version_endpoint: tuple[str, str] | None = None  # (path, JSON field) that names its version
    needs_gpu: bool = False  # serves on CUDA GPUs only
    metrics: Metrics | None = None
    launch: Launch | None = None


_TOKEN_COUNTERS = ("prompt_tokens_total", "generation_tokens_total")

ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine(
            "vllm",
            "vLLM",
            default_port=8000,
            key_env="VLLM_API_KEY",
            package="vllm",
            version_endpoint=("/version", "version"),
            needs_gpu=True,
            metrics=Metrics(
                "vllm:",
                {
                    "running": ("vllm:num_requests_running",),
                    "waiting": ("vllm:num_requests_waiting",),
                    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
                },
                {
                    "prompt_tokens": "vllm:prompt_tokens_total",
                    "generation_tokens": "vllm:generation_tokens_total",
                    "preemptions": "vllm:num_preemptions_total",
                },
                {
                    "ttft_s": ("vllm:time_to_first_token_seconds",),
                    # Per request since vLLM 0.11 (`request_` name, what the client's TPOT is); the
                    # older name observed each decode step and is gone from 0.32's page.
                    "tpot_s": ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
                },
                cache_counters=(
                    ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"),
                    ("vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits"),
                ),
                speculative=SpecNames(
                    drafts="vllm:spec_decode_num_drafts_total",
                    draft_tokens="vllm:spec_decode_num_draft_tokens_total",
                    accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
                    accepted_per_position="vllm:spec_decode_num_accepted_tokens_per_pos_total",
                ),
            ),
            launch=Launch(
                ("vllm", "serve"),
                None,
                tensor_parallel_size="--tensor-parallel-size",
                max_model_len="--max-model-len",
                gpu_memory_utilization="--gpu-memory-utilization",
                dtype="--dtype",
                quantization="--quantization",
                max_num_seqs="--max-num-seqs",
                installed_as=("command", "vllm"),
                install="pip install vllm (on a Linux machine with an NVIDIA GPU and a matching CUDA driver)",
            ),
        ),
        Engine(
            "sglang",
            "SGLang",
            default_port=30000,
            key_env="SGLANG_API_KEY",
            package="sglang",
            version_endpoint=("/get_server_info", "version"),
            needs_gpu=True,
            metrics=Metrics(
                "sglang:",
                {
                    "running": ("sglang:num_running_reqs",),
                    "waiting": ("sglang:num_queue_reqs",),
                    "kv_cache_usage": ("sglang:token_usage",),
                },
                {"prompt_tokens": "sglang:prompt_tokens_total", "generation_tokens": "sglang:generation_tokens_total"},
                {
                    "ttft_s": ("sglang:time_to_first_token_seconds",),
                    "tpot_s": ("sglang:time_per_output_token_seconds",),
                },
                cache_gauge="sglang:cache_hit_rate",
                speculative=SpecNames(
                    rate_gauge="sglang:spec_accept_rate", accept_length_gauge="sglang:spec_accept_length"
                ),
            ),
            launch=Launch(
                ("{python}", "-m", "sglang.launch_server"),
                "--model-path",
                tensor_parallel_size="--tp-size",
                max_model_len="--context-length",
                gpu_memory_utilization="--mem-fraction-static",
                dtype="--dtype",
                quantization="--quantization",
                max_num_seqs="--max-running-requests",
                always=("--enable-metrics",),
                installed_as=("module", "sglang"),
                install="pip install 'sglang[all]' (on a Linux machine with an NVIDIA GPU)",
            ),
        ),
        Engine(
            "llamacpp",
            "llama.cpp",
            aliases=("llama.cpp", "llama-server"),
            default_port=8080,
            key_env="LLAMA_API_KEY",
            package="llama_cpp_python",
            version_endpoint=("/props", "build_info"),
            metrics=Metrics(
                "llamacpp:",
                {
                    "running": ("llamacpp:requests_processing",),
                    "waiting": ("llamacpp:requests_deferred",),
                    "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
                },
                {
                    "prompt_tokens": "llamacpp:prompt_tokens_total",
                    "generation_tokens": "llamacpp:tokens_predicted_total",
                },
                speculative=SpecNames(
                    drafts="llamacpp:spec_decode_num_drafts",
                    draft_tokens="llamacpp:spec_decode_num_draft_tokens",
                    accepted_tokens="llamacpp:spec_decode_num_accepted_tokens",
                    accepted_per_position="llamacpp:spec_decode_num_accepted_tokens_per_pos",
                ),
            ),
            launch=Launch(
                ("{llama_server}",),
                "-m",
                max_model_len="-c",
                always=("--metrics",),
                installed_as=("binary", "llama-server"),
                install="build llama.cpp with -DGGML_CUDA=ON, or run scripts/setup.sh for the CPU build",
            ),
        ),
        Engine(
            "tgi",
            "TGI",
            aliases=("text-generation-inference",),
            metrics=Metrics(
                "tgi_",
                {"running": ("tgi_batch_current_size",), "waiting": ("tgi_queue_size",), "kv_cache_usage": ()},
                {},
            ),
        ),
        Engine(
            "ollama",
            "Ollama",
            aliases=("library",),  # Ollama's /v1/models says owned_by "library"
            default_port=11434,
            version_endpoint=("/api/version", "version"),
        ),
    )
}

LAUNCHABLE: tuple[str, ...] = tuple(name for name, e in ENGINES.items() if e.launch is not None)
WITH_METRICS: dict[str, Metrics] = {name: e.metrics for name, e in ENGINES.items() if e.metrics is not None}
WITH_HISTOGRAMS: dict[str, dict[str, tuple[str, ...]]] = {
    n: m.histograms for n, m in WITH_METRICS.items() if m.histograms
}
_BY_ALIAS = {alias.lower(): e for e in ENGINES.values() for alias in (e.name, *e.aliases)}


def engine(name: str | None) -> Engine | None:
    """The catalog entry for a name or any of its aliases (`llama.cpp` is `llamacpp`), else None."""
    return _BY_ALIAS.get(name.strip().lower()) if name else None


def server_root(base_url: str) -> str:
    """`http://h:p/v1` -> `http://h:p` (where llama.cpp's /tokenize, /health, /metrics live)."""
    parts = urlsplit(base_url)
    path = parts.path
    if path.endswith("/v1"):
        path = path[:-3]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
