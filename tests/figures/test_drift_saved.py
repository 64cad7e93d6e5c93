"""summary.json's `drift` section as the builder wrote it before it was typed: the same inputs give the
same keys and values, and a saved section loads into the model and is written back unchanged."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson

from tokenrace.figures.drift import drift
from tokenrace.model.monitor import TimeseriesLine
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import Summary

SAVED = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "drift" / "summary-drift.json"


def soak_inputs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A 5-minute soak: latency rising, an error burst at 150-180 s, memory growing, the clock falling
    while the GPU heats up and throttles, a warm-up and a cancelled request, a sample without a time."""
    rnd = random.Random(11)
    records = []
    for i in range(600):
        t_s = i * 0.5
        err = "connection_reset" if 150 <= t_s < 180 and i % 2 == 0 else ("cancelled" if i == 7 else None)
        e2e = 1000.0 + 2.0 * t_s + rnd.random() * 20.0
        records.append(
            {
                "seq": i,
                "phase": "warmup" if i == 3 else "measure",
                "start_ms": t_s * 1000.0,
                "error_kind": err,
                "ttft_ms": None if err else e2e / 10.0,
                "e2e_ms": None if err else e2e,
            }
        )
    samples = []
    for k in range(300):
        gpu0 = {
            "index": 0,
            "mem_used_bytes": 70_000_000_000 + k * 5_000_000,
            "util_pct": 90.0 + rnd.random(),
            "temp_c": 60.0 + k / 10,
            "sm_clock_mhz": 1980.0 - k * 2,
            "throttle": ["sw_thermal"] if k > 200 else [],
        }
        gpu1 = {"index": 1, "mem_used_bytes": 1_000_000, "util_pct": None, "temp_c": None, "throttle": None}
        samples.append(
            {
                "t_ms": None if k == 100 else k * 1000.0,
                "gpu": [gpu0, gpu1],
                "system": {"mem_used_bytes": 10_000_000_000, "proc_rss_bytes": 100_000_000 + k * 1_000_000},
                "server": {"engine": "vllm", "waiting": k % 4, "kv_cache_usage": 0.25 + k / 2000} if k % 3 else None,
            }
        )
    return records, samples


def saved_text() -> str:
    return SAVED.read_text()


def test_the_typed_builder_writes_the_section_it_wrote_before() -> None:
    records, samples = soak_inputs()
    d = drift([RequestRecord.model_validate(r) for r in records], [TimeseriesLine.model_validate(s) for s in samples])
    before = json.loads(saved_text())["drift"]
    # orjson of what json.loads read keeps int and float apart: same keys, same values, same types
    assert orjson.dumps(d.model_dump(mode="json")) == orjson.dumps(before)
    assert len(d.error_bursts) == 1 and len(d.findings) == 6 and d.trend_fit["sys_mem_used_bytes_per_min"].r is None


def test_a_saved_section_loads_and_is_written_back_unchanged() -> None:
    before = json.loads(saved_text())
    s = Summary.model_validate(before)
    assert s.drift is not None and s.drift.windows[5].errors_by_kind == {"connection_reset": 30}
    assert s.drift.windows[0].gpu_mem_used_bytes is not None and s.drift.trend.sm_clock_mhz_per_min is not None
    assert orjson.dumps(s.model_dump(mode="json")["drift"]) == orjson.dumps(before["drift"])
