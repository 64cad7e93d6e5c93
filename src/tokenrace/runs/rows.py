"""A run's key numbers as one row of a sweep or profile table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenrace.figures.cost import CostSpec, cost_of


def _pick(m: dict[str, Any], name: str) -> dict[str, Any]:
    d = m.get(name) or {}
    return {q: d.get(q) for q in ("p50", "p95", "max")}


def sweep_throughput(summary: dict[str, Any]) -> float | None:
    """The throughput a sweep compares between steps: steady output tokens/s, else over the window."""
    tp = summary["throughput"]
    value = tp.get("steady_output_tokens_per_s")
    if value is None:
        value = tp.get("output_tokens_per_s")
    return None if value is None else float(value)


def step_row(
    name: str, directory: Path, s: dict[str, Any], manifest: dict[str, Any], cost: CostSpec | None = None
) -> dict[str, Any]:
    """A step's key numbers (shared by sweeps, the embedded profile and saved profiles read back)."""
    load = manifest["settings"]["load"]
    m = s["metrics"]
    good = s.get("goodput") or {}
    return {
        "step": name,
        "concurrency": load["concurrency"],
        "rate": load.get("rate"),
        "requests": s["requests"],
        "ttft_ms": _pick(m, "ttft_ms"),
        "tpot_ms": _pick(m, "tpot_ms"),
        "itl_chunk_ms": _pick(m, "itl_chunk_ms"),
        "e2e_ms": _pick(m, "e2e_ms"),
        "prompt_tokens_mean": (m.get("prompt_tokens") or {}).get("mean"),
        "cache_hit_rate": (s.get("cache") or {}).get("hit_rate"),
        "output_tokens_per_s": s["throughput"]["output_tokens_per_s"],
        "steady_output_tokens_per_s": s["throughput"].get("steady_output_tokens_per_s"),
        "throughput_tokens_per_s": sweep_throughput(s),
        "requests_per_s": s["throughput"]["requests_per_s"],
        "achieved_rate": s.get("achieved_rate"),
        "error_rate": s["error_rate"],
        "goodput_fraction": good.get("fraction"),
        "goodput_requests_per_s": good.get("requests_per_s"),
        "server_vs_client": s.get("server_vs_client"),
        "efficiency": s.get("efficiency"),
        "cost": cost_of(s, manifest, cost),
        "content": ((manifest["settings"].get("prompts") or {}).get("content")),
        "acceptance_rate": (s.get("speculative") or {}).get("acceptance_rate"),
        "output_tokens_per_joule": (s.get("energy") or {}).get("output_tokens_per_joule"),
        "run_dir": str(directory),
    }
