"""Hardware planning: will a model fit, on how many devices, and how fast can it possibly run?

Stable public API (other parts of tokenrace call these; keep the signatures):

- ``load_model(name_or_path) -> ModelSpec``
  A catalog name with fuzzy aliases ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", "gemma-4-31b",
  "smollm2-135m"), a config.json file or a model folder, or a .gguf file. For GGUF the spec records the
  file's size, its quantization type and the exact tensor bytes (``spec.gguf``), which weights use.
  ``spec.weights_bytes`` is the weights at the model's own precision.
- ``load_hardware(name) -> Hardware``
  A catalog device ("H100-SXM", "rtx 4090", "groq"), or "cpu": this machine, with its bandwidth
  measured once per process by ``measure_cpu_bandwidth()``. Fields: ``memory_bytes``,
  ``bandwidth_bytes_per_s``, ``flops`` (dense FLOP/s by dtype), ``source``.
- ``measure_cpu_bandwidth(seconds=0.3) -> float``
  Bytes/s: the best round of a multi-threaded numpy copy over buffers larger than the last-level
  cache, counting one read and one write per byte (see ``tokenrace.plan.probe``).
- ``plan(model, hardware, *, devices=None, precision=None, kv_dtype="fp16", context=4096,
  concurrency=1, input_tokens=None, link=None) -> PlanResult``
  ``model``/``hardware`` may be names or loaded objects. Without ``devices`` the minimum count that
  fits is used. ``input_tokens`` (the prompt, for the TTFT bound) defaults to ``context``. ``link``
  names the interconnect inside a tensor-parallel group (default: the device's first). The decode
  step is max(memory, compute) + the communication on the token's path (``result.layout`` says how
  the devices are assumed to be laid out; ``result.decode.comm`` lists the trips).
  ``result.to_dict()`` gives the JSON keys (a ``PlanJson``: ``weights_bytes``, ``kv_bytes_per_token``, ``total_bytes``,
  ``fits``, ``min_devices``, ``max_concurrency``, ``decode_tokens_per_s_bound`` (per stream at the
  given concurrency), ``aggregate_tokens_per_s_bound``, ``ttft_ms_bound``, ``decode_bound_by``
  (memory, compute or communication), ``decode_communication_ms``, ``layout``,
  ``decode_tokens_per_joule_at_tdp``, ...); ``result.explain()`` gives the formulas with the figures
  put in, one string per line.
- ``efficiency(measured_decode_tok_s_per_stream, measured_ttft_ms, plan_result) -> Efficiency`` (the summary's model):
  ``decode_pct_of_bound`` (measured ÷ bound), ``ttft_pct_of_bound`` (bound ÷ measured: TTFT is a time,
  so 100 % is the physical limit for both), ``aggregate_pct_of_bound`` when
  ``measured_aggregate_tok_s=`` is given; None where undefined, never 0; ``warnings`` holds a
  ``RunWarning`` per measurement that beats its bound (``efficiency.decode_beats_bound``,
  ``efficiency.aggregate_beats_bound``, ``efficiency.ttft_beats_bound``; the message
  "measurement beats the bound: ...", the figures behind it). For a benchmark, plan at the run's concurrency with
  ``context`` = mean prompt tokens + mean output tokens / 2 (the mean KV length while decoding) and
  ``input_tokens`` = mean prompt tokens; a smaller context only raises the bound.
- ``check_fit(model, hardware, devices, precision, context, concurrency) -> FitVerdict``
  ``.fits`` and a one-line ``.message`` for a launcher's refusal, e.g. "Gemma 4 31B (30.7B) in bf16
  needs ~61.4 GB of weights, but this GPU has 24 GiB (...): use an INT4 AWQ checkpoint, or
  --tensor-parallel-size 4"; ``.suggestions`` lists the fixes separately.

- ``nearest_published(model, hardware, devices=None) -> PointCheck | None``
  The published decode speed closest to a configuration (published.json, every row with its source),
  planned as its source states: ``.share_pct`` of its own bound (× tokens per step for speculative
  decoding), ``.line()``, ``.to_dict()``. For a report that shows a measured run beside what others
  published. ``published_points()`` and ``check_point(point)`` give the whole table.

Formulas and assumptions: docs/plan.md.
"""

from tokenrace.plan.catalog import Hardware, catalog_hardware, catalog_models, load_hardware, load_model
from tokenrace.plan.modelspec import AttentionGroup, ModelSpec
from tokenrace.plan.planner import FitVerdict, PlanResult, check_fit, efficiency, plan
from tokenrace.plan.precision import PRECISIONS, Precision, get_precision
from tokenrace.plan.probe import measure_cpu_bandwidth
from tokenrace.plan.published import PointCheck, PublishedPoint, check_point, nearest_published, published_points

__all__ = [
    "PRECISIONS",
    "AttentionGroup",
    "FitVerdict",
    "Hardware",
    "ModelSpec",
    "PlanResult",
    "PointCheck",
    "Precision",
    "PublishedPoint",
    "catalog_hardware",
    "catalog_models",
    "check_fit",
    "check_point",
    "efficiency",
    "get_precision",
    "load_hardware",
    "load_model",
    "measure_cpu_bandwidth",
    "nearest_published",
    "plan",
    "published_points",
]
