"""A saved run's requests as the `Sample` objectives are judged on (figures/objectives.py)."""

from __future__ import annotations

from pathlib import Path

from tokenrace.figures.objectives import Sample
from tokenrace.model.files import RECORDS, SUMMARY, read_jsonl
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import Summary
from tokenrace.runs.store import read_json


def sample_of(directory: Path, phase: str = "measure") -> Sample:
    """The measured requests of the run in `directory` (cold, warm-up and probe requests left out,
    cancelled ones too, as in the summary), with its whole-run rates and goodput count. `phase`
    "cold" gives the cold request alone (and no whole-run rates)."""
    lines = [RequestRecord.model_validate(line) for line in read_jsonl(directory / RECORDS)]
    measured = [r for r in lines if r.phase == phase and r.error_kind != "cancelled"]
    ok = [r for r in measured if r.error_kind is None]
    summary = Summary.model_validate(read_json(directory / SUMMARY))
    if phase != "measure":
        summary = Summary()
    tp = summary.throughput
    return Sample(
        ttft_ms=[r.ttft_ms for r in ok if r.ttft_ms is not None],
        tpot_ms=[r.tpot_ms for r in ok if r.tpot_ms is not None],
        e2e_ms=[r.e2e_ms for r in ok if r.e2e_ms is not None],
        itl_ms=[[b - a for a, b in zip(r.chunk_offsets_ms, r.chunk_offsets_ms[1:], strict=False)] for r in ok],
        measured=len(measured),
        failed=len(measured) - len(ok),
        within_slo=summary.goodput.requests if summary.goodput is not None else None,
        output_tok_s=[tp.output_tokens_per_s] if tp.output_tokens_per_s is not None else [],
        requests_per_s=[tp.requests_per_s] if tp.requests_per_s is not None else [],
    )
