"""Other tools' results, as tokenrace runs: vLLM `bench serve`, AIPerf, and llm-d's Benchmark Report.

vLLM and AIPerf keep each request: each becomes a RequestRecord (times relative to the first
start), and the summary is computed by the same `summarize` as our own runs, so every figure keeps
its one definition. The field mapping is in docs/sweep.md ("Importing vLLM and AIPerf results").
A Benchmark Report (llm-d-benchmark, inference-perf, `tokenrace export --format br`) keeps
statistics only: they become the summary, in tokenrace's units, and the run has no records
(docs/metrics.md, "llm-d Benchmark Report").
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

from tokenrace import __version__
from tokenrace.errors import UsageError
from tokenrace.load.windows import Windows
from tokenrace.model.base import checked_for_writing
from tokenrace.model.files import MANIFEST, RECORDS, SCHEMA_VERSION, SUMMARY, read_jsonl
from tokenrace.model.manifest import Manifest
from tokenrace.model.records import Phase, RequestRecord
from tokenrace.model.sections import Speculative
from tokenrace.model.stats import Stats
from tokenrace.model.summary import Imported, RequestCounts, Summary
from tokenrace.runs.benchmark_report import NATIVE_KEYS, SUFFIXES
from tokenrace.runs.run import Run
from tokenrace.runs.store import default_run_dir, write_json, write_model
from tokenrace.runs.summary import RunContext, build_summary

NS = 1_000_000_000
UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": NS, "sec": NS}
AIPERF_AGGREGATE = "profile_export_aiperf.json"


def detect(path: Path) -> str | None:
    """'vllm', 'aiperf' or 'br' (llm-d's Benchmark Report) from the file's content, or None."""
    if read_benchmark_report(path) is not None:
        return "br"
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        head = orjson.loads(first)
    except orjson.JSONDecodeError:
        head = None
    if isinstance(head, dict) and isinstance(head.get("metadata"), dict) and "metrics" in head:
        return "aiperf"
    doc = head if isinstance(head, dict) else _json_or_none(path)
    if isinstance(doc, dict) and ("ttfts" in doc or {"duration", "completed", "model_id"} <= set(doc)):
        return "vllm"
    return None


def _json_or_none(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return None


def import_file(path: Path) -> Run:
    kind = detect(path)
    if kind == "vllm":
        return from_vllm(_json(path), path)
    if kind == "aiperf":
        return from_aiperf(read_jsonl(path), path, _aiperf_aggregate(path))
    report = read_benchmark_report(path) if kind == "br" else None
    if report is not None:
        return from_benchmark_report(report, path)
    raise UsageError(
        f"{path}: not a vLLM bench serve result (saved with --save-result --save-detailed), "
        "an AIPerf profile_export.jsonl nor an llm-d Benchmark Report (v0.2 or v0.2.1, JSON or YAML)"
    )


def import_to_dir(path: Path, out: Path | None = None) -> Path:
    """Convert a result file into a new run directory under `out` (default runs/):
    records.jsonl, summary.json and manifest.json, like a run of our own."""
    data = import_file(path)
    directory = default_run_dir(f"{data.manifest.tool.split()[0]}-{Path(path).stem}", out or "runs")
    if (directory / RECORDS).exists():
        raise UsageError(f"{directory} already holds a run")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RECORDS).write_bytes(b"".join(orjson.dumps(r.model_dump(mode="json")) + b"\n" for r in data.records()))
    write_model(directory / SUMMARY, data.summary)
    manifest = checked_for_writing(data.manifest).model_dump(mode="json")
    # The other tool states only part of the settings: they are kept as it stated them.
    manifest["settings"] = data.manifest.settings.model_dump(mode="json", exclude_unset=True)
    write_json(directory / MANIFEST, manifest)
    return directory


def _json(path: Path) -> dict[str, Any]:
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return doc


# --- shared -------------------------------------------------------------------------------------


def _record(
    seq: int,
    phase: Phase,
    start_ns: int,
    ttft_ns: int | None,
    gaps_ns: Sequence[int],
    end_ns: int | None,
    output_tokens: int | None,
    prompt_tokens: int | None,
    source: str,
) -> RequestRecord:
    rec = RequestRecord(seq=seq, phase=phase, start_ns=start_ns, end_ns=end_ns)
    if ttft_ns is not None:
        chunks = [start_ns + ttft_ns]
        for g in gaps_ns:
            chunks.append(chunks[-1] + g)
        rec.first_token_ns = rec.first_answer_ns = chunks[0]
        rec.chunk_ns = chunks
        if rec.end_ns is None:
            rec.end_ns = chunks[-1]
    rec.output_tokens, rec.output_tokens_source = output_tokens, source if output_tokens is not None else None
    rec.prompt_tokens, rec.prompt_tokens_source = prompt_tokens, source if prompt_tokens is not None else None
    if output_tokens is not None and output_tokens == len(rec.chunk_ns):
        rec.chunk_tokens = [1] * output_tokens  # one token per chunk, as for our own runs
    return rec


def _run(path: Path, records: list[RequestRecord], windows: Windows, manifest: dict[str, Any]) -> Run:
    for r in records:
        r.settle(0)  # times are already relative to the first start
    summary = build_summary(records, RunContext(windows))
    summary.imported = Imported(tool=manifest["tool"], source_file=str(path))
    return Run(path, "run", summary, Manifest.model_validate(manifest), _records=records)


def _manifest(
    tool: str, path: Path, model: str | None, started: str | None, settings: dict[str, Any], extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": tool,
        "version": None,
        "command": extra.pop("command", None),
        "settings": settings,
        "endpoint": extra.pop("endpoint", None),
        "provider": extra.pop("provider", None),
        "model": model,
        "prompts": {"name": extra.pop("prompts", None), "count": None, "sizing": None},
        "started_at": started,
        "finished_at": None,
        "imported": {
            "source_file": str(path),
            "imported_at": datetime.now(UTC).isoformat(),
            "imported_by": f"tokenrace {__version__}",
            **extra,
        },
    }


def _settings(
    label: str | None,
    concurrency: int | None,
    rate: float | None,
    stream: bool | None,
    api: str | None,
    max_tokens: int | None = None,
    input_tokens: Any = None,
    output_tokens: Any = None,
) -> dict[str, Any]:
    return {
        "label": label,
        "load": {"concurrency": concurrency, "rate": rate},
        "request": {"stream": stream, "api": api, "max_tokens": max_tokens, "extra_body": {}},
        "prompts": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


# --- vLLM bench serve --------------------------------------------------------------------------------


def from_vllm(doc: dict[str, Any], path: Path) -> Run:
    ttfts = doc.get("ttfts")
    if not isinstance(ttfts, list):
        raise UsageError(f"{path}: no per-request results; run vllm bench serve with --save-result --save-detailed")
    n = len(ttfts)

    def col(key: str, default: Any = None) -> list[Any]:
        return list(doc.get(key) or [default] * n)

    starts, lats, errors = doc.get("start_times"), col("latencies"), col("errors", "")
    itls, outs, ins, texts = col("itls", []), col("output_lens"), col("input_lens"), col("generated_texts", "")
    t0 = min(starts) if starts else 0.0
    records = []
    for i in range(n):
        start = round((starts[i] - t0) * NS) if starts else 0
        failed = bool(errors[i])
        latency = lats[i] if lats[i] else None
        rec = _record(
            i,
            "measure",
            start,
            None if failed else round(ttfts[i] * NS),
            [round(g * NS) for g in itls[i] or []],
            start + round(latency * NS) if latency and not failed else None,
            None if failed else outs[i],
            ins[i],
            "vllm",
        )
        if failed:
            rec.end_ns = start + round(latency * NS) if latency else None
            rec.fail("imported", str(errors[i]).strip().splitlines()[-1] if str(errors[i]).strip() else "failed")
        rec.text = texts[i] or ""
        records.append(rec)
    rate = doc.get("request_rate")
    rate = float(rate) if isinstance(rate, (int, float)) else None
    run = _run(path, records, Windows(offered_rate=rate), _vllm_manifest(doc, path, rate))
    if not starts:
        _window_from_duration(run.summary, doc.get("duration"))
    run.summary.speculative = _vllm_speculative(doc)
    return run


def _vllm_speculative(doc: dict[str, Any]) -> Speculative | None:
    """vLLM bench's own spec-decode figures (deltas of the same /metrics counters over its run):
    `spec_decode_acceptance_rate` is a percentage, the per-position rates are fractions, and its
    acceptance length is 1 + accepted ÷ drafts."""
    rate = doc.get("spec_decode_acceptance_rate")
    if not isinstance(rate, (int, float)):
        return None
    length = doc.get("spec_decode_acceptance_length")
    per_position = doc.get("spec_decode_per_position_acceptance_rates")
    return Speculative(
        source="vllm bench serve result (spec_decode_*)",
        drafts=doc.get("spec_decode_num_drafts"),
        draft_tokens=doc.get("spec_decode_draft_tokens"),
        accepted_tokens=doc.get("spec_decode_accepted_tokens"),
        acceptance_rate=rate / 100.0,
        mean_accepted_per_draft=length - 1.0 if isinstance(length, (int, float)) else None,
        tokens_per_step=length if isinstance(length, (int, float)) else None,
        per_position=per_position if isinstance(per_position, list) else None,
    )


def _vllm_manifest(doc: dict[str, Any], path: Path, rate: float | None) -> dict[str, Any]:
    backend = doc.get("backend") or doc.get("endpoint_type")
    started = None
    if doc.get("date"):
        try:
            started = datetime.strptime(
                doc["date"], "%Y%m%d-%H%M%S"
            ).isoformat()  # local time of the machine that ran it
        except ValueError:
            started = str(doc["date"])
    settings = _settings(
        doc.get("label"),
        doc.get("max_concurrency"),
        rate,
        True,
        "chat" if backend and "chat" in str(backend) else "completions",
    )
    settings["load"]["burstiness"] = doc.get("burstiness")
    settings["load"]["requests"] = doc.get("num_prompts")
    return _manifest(
        "vllm bench serve",
        path,
        doc.get("model_id"),
        started,
        settings,
        {
            "provider": backend,
            "vllm_result": {
                k: doc.get(k)
                for k in ("duration", "completed", "failed", "output_throughput", "request_throughput", "tokenizer_id")
            },
        },
    )


def _window_from_duration(summary: Summary, duration: float | None) -> None:
    """Older vLLM results have no start times: throughput over the benchmark's own duration."""
    tp = summary.throughput
    if not duration:
        tp.window_s = tp.output_tokens_per_s = tp.requests_per_s = None
        return
    tokens = summary.metrics.output_tokens
    out = (tokens.mean or 0) * tokens.count
    tp.window_s = round(duration, 6)
    tp.output_tokens_per_s = round(out / duration, 4)
    tp.requests_per_s = round(summary.requests.succeeded / duration, 4)
    summary.achieved_rate = None
    if summary.imported is not None:
        summary.imported.window = "duration"


# --- AIPerf ------------------------------------------------------------------------------------------


def _ns(metric: dict[str, Any] | None) -> int | None:
    if not isinstance(metric, dict) or metric.get("value") is None:
        return None
    scale = UNIT_NS.get(str(metric.get("unit", "ms")).lower())
    if scale is None:
        raise UsageError(f"AIPerf: unknown time unit {metric.get('unit')!r}")
    return round(float(metric["value"]) * scale)


def _gaps_ns(metric: dict[str, Any] | None) -> list[int]:
    if not isinstance(metric, dict) or not isinstance(metric.get("value"), list):
        return []
    scale = UNIT_NS.get(str(metric.get("unit", "ms")).lower(), 1_000_000)
    return [round(float(v) * scale) for v in metric["value"]]


def _count(metric: dict[str, Any] | None) -> int | None:
    return int(metric["value"]) if isinstance(metric, dict) and metric.get("value") is not None else None


def from_aiperf(lines: list[dict[str, Any]], path: Path, aggregate: dict[str, Any] | None = None) -> Run:
    lines = [x for x in lines if isinstance(x.get("metadata"), dict)]
    if not lines:
        raise UsageError(f"{path}: no AIPerf records (one JSON object per line with metadata and metrics)")
    t0 = min(x["metadata"].get("request_start_ns") or x["metadata"].get("timestamp_ns") or 0 for x in lines)
    records = [_aiperf_record(i, x, t0) for i, x in enumerate(lines)]
    return _run(path, records, Windows(), _aiperf_manifest(path, aggregate or {}, t0))


def _aiperf_record(seq: int, x: dict[str, Any], t0: int) -> RequestRecord:
    meta, m, err = x["metadata"], x.get("metrics") or {}, x.get("error")
    phase: Phase = "warmup" if (meta.get("benchmark_phase") or meta.get("credit_phase")) == "warmup" else "measure"
    start = (meta.get("request_start_ns") or meta.get("timestamp_ns") or t0) - t0
    latency = _ns(m.get("request_latency"))
    end = (
        start + latency
        if latency is not None
        else (meta["request_end_ns"] - t0 if meta.get("request_end_ns") else None)
    )
    failed = isinstance(err, dict)
    rec = _record(
        seq,
        phase,
        start,
        None if failed else _ns(m.get("time_to_first_token")),
        _gaps_ns(m.get("inter_chunk_latency")),
        end,
        None if failed else _count(m.get("output_sequence_length") or m.get("output_token_count")),
        _count(m.get("input_sequence_length") or m.get("error_isl")),
        "aiperf",
    )
    if isinstance(err, dict):
        rec.end_ns = end
        rec.fail("imported", f"{err.get('type') or 'error'}: {err.get('message') or ''}".strip(), err.get("code"))
    return rec


def _aiperf_aggregate(path: Path) -> dict[str, Any] | None:
    agg = path.with_name(AIPERF_AGGREGATE)
    try:
        doc = orjson.loads(agg.read_bytes()) if agg.is_file() else None
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _aiperf_manifest(path: Path, agg: dict[str, Any], t0: int) -> dict[str, Any]:
    cfg = agg.get("input_config") or {}
    ep, load, prompt = cfg.get("endpoint") or {}, cfg.get("loadgen") or {}, (cfg.get("input") or {}).get("prompt") or {}
    models = ep.get("model_names") or []
    started = datetime.fromtimestamp(t0 / NS, UTC).isoformat() if t0 > 1e18 else agg.get("start_time")
    out_mean = (prompt.get("output_tokens") or {}).get("mean")
    in_mean = (prompt.get("input_tokens") or {}).get("mean")
    settings = _settings(
        None,
        load.get("concurrency"),
        load.get("request_rate"),
        ep.get("streaming"),
        ep.get("type"),
        input_tokens=[in_mean, 0.0] if in_mean else None,
        output_tokens=[out_mean, 0.0] if out_mean else None,
    )
    return _manifest(
        "aiperf",
        path,
        models[0] if models else None,
        started,
        settings,
        {
            "command": cfg.get("cli_command", "").split() or None,
            "endpoint": ep.get("url"),
            "aggregate_file": str(path.with_name(AIPERF_AGGREGATE)) if agg else None,
        },
    )


# --- llm-d's Benchmark Report ---------------------------------------------------------------------

BR_VERSIONS = ("0.2", "0.2.1")  # 0.2.1 only adds optional fields to 0.2
# The format's units that tokenrace reads, as factors to its own (ms, ms/token, tokens).
BR_TIME = {"ms": 1.0, "s": 1000.0, "ms/token": 1.0, "s/token": 1000.0}
BR_COUNT = {"count": 1.0}
# (summary metric, the report's field): latencies (docs/metrics.md, "llm-d Benchmark Report")
BR_LATENCY = (
    ("ttft_ms", "time_to_first_token"),
    ("tpot_ms", "time_per_output_token"),
    ("itl_chunk_ms", "inter_token_latency"),
    ("e2e_ms", "request_latency"),
)
BR_LENGTHS = (("prompt_tokens", "input_length"), ("output_tokens", "output_length"))


def read_benchmark_report(path: Path) -> dict[str, Any] | None:
    """The file as a Benchmark Report (JSON or YAML, by its extension), or None when it is not one."""
    if path.suffix.lower() not in SUFFIXES or not path.is_file():
        return None
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        # Python's json reads the Infinity a `concurrency: .inf` becomes; orjson does not.
        doc = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None
    is_report = isinstance(doc, dict) and "version" in doc and isinstance(doc.get("run"), dict)
    return doc if is_report and isinstance(doc.get("results"), dict) else None


def from_benchmark_report(doc: dict[str, Any], path: Path) -> Run:
    """A Benchmark Report as a run: its statistics become the summary, in tokenrace's units; its
    scenario the manifest. No records: the format has none, so compare shows it without intervals."""
    version = str(doc.get("version"))
    if version not in BR_VERSIONS:
        raise UsageError(f"{path}: Benchmark Report version {version} (tokenrace reads {', '.join(BR_VERSIONS)})")
    load = _at(doc, "scenario", "load", "standardized") or {}
    summary = _br_summary(_at(doc, "results", "request_performance", "aggregate") or {}, path)
    summary.imported = Imported(tool=str(load.get("tool") or "benchmark report"), source_file=str(path))
    return Run(path, "run", summary, _br_manifest(doc, load, path), _records=[])


def _at(doc: Any, *keys: str) -> Any:
    for k in keys:
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc


def _br_summary(aggregate: dict[str, Any], path: Path) -> Summary:
    """The format counts every request sent (`total`), those that failed (`failures`) and those not
    completed (`incomplete`, tokenrace's cancelled, which its total leaves out)."""
    req = aggregate.get("requests") or {}
    total, failed, incomplete = (_br_int(req.get(k)) for k in ("total", "failures", "incomplete"))
    s = Summary()
    if total is not None:
        measured = total - (incomplete or 0)
        succeeded = measured - (failed or 0)
        s.requests = RequestCounts(total=measured, succeeded=succeeded, failed=failed or 0, cancelled=incomplete or 0)
        s.error_rate = round(failed / measured, 4) if measured and failed is not None else None
    n = s.requests.succeeded
    latency = aggregate.get("latency") or {}
    for ours, theirs in BR_LATENCY:
        setattr(s.metrics, ours, _br_stats(latency.get(theirs), n, BR_TIME, path, theirs))
    for ours, theirs in BR_LENGTHS:
        setattr(s.metrics, ours, _br_stats(req.get(theirs), n, BR_COUNT, path, theirs))
    rates = aggregate.get("throughput") or {}
    s.throughput.output_tokens_per_s = _br_rate(rates.get("output_token_rate"), "tokens/s", path)
    s.throughput.requests_per_s = _br_rate(rates.get("request_rate"), "queries/s", path)
    return s


def _br_int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _br_number(v: Any, scale: float = 1.0) -> float | None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return None
    return round(float(v) * scale, 4)


def _br_stats(stat: Any, count: int, units: dict[str, float], path: Path, name: str) -> Stats:
    """The format's statistics in our units. `count` is the succeeded requests: the format does not
    say how many values a statistic pooled."""
    if not isinstance(stat, dict) or _br_number(stat.get("mean")) is None:
        return Stats()
    scale = units.get(str(stat.get("units")))
    if scale is None:
        raise UsageError(f"{path}: {name} in {stat.get('units')!r}; tokenrace reads {', '.join(units)}")
    names = {"mean": "mean", "std": "stddev", "min": "min", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
    found = {ours: _br_number(stat.get(theirs), scale) for ours, theirs in names.items()}
    return Stats(count=count, max=_br_number(stat.get("max"), scale), **found)


def _br_rate(stat: Any, unit: str, path: Path) -> float | None:
    if not isinstance(stat, dict):
        return None
    if stat.get("units") != unit:
        raise UsageError(f"{path}: a rate in {stat.get('units')!r}, expected {unit}")
    return _br_number(stat.get("mean"))


def _br_manifest(doc: dict[str, Any], load: dict[str, Any], path: Path) -> Manifest:
    """Reports tokenrace wrote (of its own runs or of imported ones) carry a slice of the manifest as
    the load's native config; another tool's give what their standardized load and stack say."""
    native = _at(doc, "scenario", "load", "native", "config")
    # A report tokenrace wrote: its native config is that slice and nothing else.
    ours = isinstance(native, dict) and isinstance(native.get("settings"), dict) and set(native) <= NATIVE_KEYS
    fields: dict[str, Any] = {k: v for k, v in native.items() if k in NATIVE_KEYS} if ours else {}
    fields.setdefault("settings", _br_settings(load))
    stack = _at(doc, "scenario", "stack") or []
    named = (_at(c, "standardized", "model", "name") or _at(c, "standardized", "model") for c in stack)
    model = next((m for m in named if isinstance(m, str)), None) or _at(native, "server", "model_name")
    if isinstance(model, str):
        fields.setdefault("model", model)
    time = _at(doc, "run", "time") or {}
    return Manifest.model_validate(
        {
            **fields,
            "tool": str(load.get("tool") or "benchmark report"),
            "version": load.get("tool_version"),
            "started_at": _br_time(time.get("start")),
            "finished_at": _br_time(time.get("end")),
            "imported": {
                "source_file": str(path),
                "imported_at": datetime.now(UTC).isoformat(),
                "imported_by": f"tokenrace {__version__}",
            },
        }
    )


def _br_time(v: Any) -> str | None:
    return v.isoformat() if isinstance(v, datetime) else str(v) if v else None


def _br_settings(load: dict[str, Any]) -> dict[str, Any]:
    """Another tool's standardized load as tokenrace's settings: concurrency, rate, and the prompt and
    output lengths it was set to (a length of distribution `other` is what it measured: left out)."""

    def length(seq: Any) -> list[float] | None:
        if not isinstance(seq, dict) or _br_number(seq.get("value")) is None or seq.get("distribution") == "other":
            return None
        return [float(seq["value"]), float(seq.get("std_dev") or 0.0)]

    concurrency = load.get("concurrency")
    return {
        "load": {"concurrency": concurrency if isinstance(concurrency, int) else None, "rate": load.get("rate_qps")},
        "prompts": {
            "input_tokens": length(load.get("input_seq_len")),
            "output_tokens": length(load.get("output_seq_len")),
        },
    }
