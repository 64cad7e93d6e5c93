"""Every figure of the speculative, content and energy sections is defined in docs/metrics.md and in
the summary's JSON Schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from tokenrace.model.sections import ContentKind, ContentSpeed, Energy, GpuEnergy, Speculative

ROOT = Path(__file__).resolve().parents[2]
SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("speculative", Speculative),
    ("content", ContentSpeed),
    ("content.kinds.<kind>", ContentKind),
    ("energy", Energy),
    ("energy.gpus[]", GpuEnergy),
]


@pytest.mark.parametrize(("prefix", "model"), SECTIONS)
def test_every_field_is_defined_in_metrics_md(prefix: str, model: type[BaseModel]) -> None:
    rows = [
        line
        for line in (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8").splitlines()
        if line.startswith(f"| `{prefix}.")
    ]
    for name in model.model_fields:
        assert any(re.search(rf"[`.]{re.escape(name)}`", row) for row in rows), f"{prefix}.{name}"


def test_the_sections_are_in_the_summary_schema() -> None:
    schema = json.loads((ROOT / "docs" / "schema" / "summary.schema.json").read_text(encoding="utf-8"))
    for section, model in (("speculative", Speculative), ("content", ContentSpeed), ("energy", Energy)):
        assert section in schema["properties"]
        assert set(model.model_fields) <= set(schema["$defs"][model.__name__]["properties"])
    sweep = json.loads((ROOT / "docs" / "schema" / "sweep.schema.json").read_text(encoding="utf-8"))
    assert {"acceptance_rate", "output_tokens_per_joule", "content"} <= set(sweep["$defs"]["StepRow"]["properties"])
