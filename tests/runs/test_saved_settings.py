"""manifest.json's settings are generated from the settings' own declarations, and a run's settings
are saved by the same rules: the key never kept, secret values hidden, the shape as before."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from tests.conftest import fake_key

from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.client.request import RequestOptions
from tokenrace.figures.cost import CostSpec, GpuCost
from tokenrace.figures.slo import parse_slo
from tokenrace.load.runner import Load
from tokenrace.load.shapes import Stage
from tokenrace.load.workload import WorkloadSpec
from tokenrace.load.workloads.images import ImageSpec
from tokenrace.load.workloads.sessions import TurnsSpec
from tokenrace.model.base import checked_for_writing
from tokenrace.model.manifest import Manifest
from tokenrace.model.settings import RunSettings
from tokenrace.runs.settings import BenchSettings, PromptSpec

ROOT = Path(__file__).resolve().parents[2]
KEY = fake_key("", "saved-settings")


def test_the_settings_model_is_generated_from_the_declarations() -> None:
    generator = runpy.run_path(str(ROOT / "scripts" / "gen_settings_model.py"))
    committed = (ROOT / "src" / "tokenrace" / "model" / "settings.py").read_text(encoding="utf-8")
    assert generator["source"]() == committed, (
        "src/tokenrace/model/settings.py is stale: run python scripts/gen_settings_model.py and commit it"
    )


def _settings() -> BenchSettings:
    return BenchSettings(
        endpoint=ResolvedEndpoint("http://h:1/v1", KEY, "GROQ_API_KEY", "groq"),
        model="m",
        request=RequestOptions(
            extra_headers={"X-Team": "blue", "X-Route": "r1", "Authorization": f"Bearer {KEY}"},
            extra_body={"top_k": 5, "client_secret": "s3"},
            tools=[{"type": "function", "function": {"name": "f"}}],
            response_schema=True,
        ),
        load=Load(rate=2, stages=(Stage(10.0, 1.0), Stage(5.0, 2)), requests=9),
        prompts=PromptSpec(input_tokens=(512, 64.0)),
        workload=WorkloadSpec(turns=TurnsSpec(3.0), images=ImageSpec(sizes=((64, 32),))),
        slo=parse_slo("ttft<=500ms,e2e<=2s"),
        output=Path("/tmp/run"),
        cost=CostSpec(gpu=GpuCost(2.5, 2)),
        secret_headers=("X-Route",),
    )


def test_saved_settings_keep_the_shape_and_hide_every_secret() -> None:
    saved = checked_for_writing(_settings().saved())  # every key it holds is declared
    data = saved.model_dump(mode="json")
    assert KEY not in json.dumps(data) and "s3" not in json.dumps(data)
    assert data["endpoint"] == {"base_url": "http://h:1/v1", "api_key_from": "GROQ_API_KEY", "provider": "groq"}
    assert data["request"]["extra_headers"] == {"X-Team": "blue", "X-Route": "***", "Authorization": "***"}
    assert data["request"]["extra_body"] == {"top_k": 5, "client_secret": "***"}
    assert data["request"]["response_schema"] is True and data["request"]["tools"][0]["type"] == "function"
    assert data["slo"] == {"ttft_ms": 500.0, "e2e_ms": 2000.0}
    assert data["output"] == "/tmp/run" and data["secret_headers"] == ["X-Route"]
    # Numbers keep the JSON type they were given in: a whole rate of 2 stays 2.
    assert data["load"]["rate"] == 2 and isinstance(data["load"]["rate"], int)
    assert data["load"]["stages"] == [{"duration_s": 10.0, "value": 1.0}, {"duration_s": 5.0, "value": 2}]
    assert data["prompts"]["input_tokens"] == [512, 64.0]
    assert data["workload"]["turns"] == {"mean": 3.0, "std": 0.0}
    assert data["workload"]["images"]["sizes"] == [[64, 32]]
    assert data["cost"] == {"price": None, "gpu": {"usd_per_gpu_hour": 2.5, "gpus": 2}}
    # Read back, the file is what was saved.
    assert RunSettings.model_validate_json(saved.model_dump_json()) == saved


def test_an_older_manifest_reads_what_it_does_not_state_as_none() -> None:
    manifest = ROOT / "tests" / "fixtures" / "runs" / "schema-v1" / "manifest.json"
    settings = Manifest.model_validate_json(manifest.read_bytes()).settings
    assert settings.load is not None and settings.load.requests == 3
    assert settings.load.probe_rate is None and settings.load.saturation_stop is None  # later settings
    assert settings.prompts is not None and settings.prompts.content is None
    partial = RunSettings.model_validate({"load": {"concurrency": 4}, "workload": {"turns": {"mean": 2}}})
    assert partial.load is not None and partial.load.concurrency == 4 and partial.load.arrival is None
    assert partial.workload is not None and partial.workload.turns is not None
    assert partial.workload.turns.std is None  # not stated: unknown, not the runtime's default
