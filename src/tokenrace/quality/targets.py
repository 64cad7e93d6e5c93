"""What a quality run is pointed at: an endpoint, a GGUF served by the embedded engine, or (for a
comparison) a finished run directory; and running the items against it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tokenrace.client.providers import normalize_base_url
from tokenrace.errors import InvalidInput
from tokenrace.model.files import ITEMS
from tokenrace.quality.models import EngineInfo, QualityResult
from tokenrace.quality.runner import OnItem, QualitySettings, run_quality
from tokenrace.quality.suites import Item
from tokenrace.serve.embedded import EmbeddedOptions, gguf_quantization
from tokenrace.serve.launch import start_embedded


@dataclass(slots=True)
class Target:
    kind: Literal["endpoint", "gguf", "run"]
    value: str  # a base URL, a .gguf path, or a run directory
    label: str


def parse_target(text: str) -> Target:
    """A run directory (holds items.jsonl), an http(s) URL, or a .gguf file."""
    path = Path(text)
    if path.is_dir():
        if not (path / ITEMS).is_file():
            raise InvalidInput("compare", f"{text}: a directory without {ITEMS} (not a quality run)")
        return Target("run", str(path), path.name)
    if text.startswith(("http://", "https://")):
        return Target("endpoint", normalize_base_url(text), text)
    if text.endswith(".gguf"):
        if not path.is_file():
            raise InvalidInput("compare", f"{text}: no such file")
        return Target("gguf", str(path), gguf_quantization(path) or path.stem)
    raise InvalidInput("compare", f"{text!r} is not a quality run directory, an http(s) URL or a .gguf file")


async def run_target(
    target: Target,
    items: list[Item],
    settings: QualitySettings,
    out_dir: Path,
    on_item: OnItem | None = None,
    engine_options: EmbeddedOptions | None = None,
) -> QualityResult:
    """Run the items against an endpoint, or start the embedded engine on a GGUF and run them there
    (the engine is stopped afterwards, so two GGUFs never share the machine's cores)."""
    if target.kind == "endpoint":
        return await run_quality(items, dataclasses.replace(settings, base_url=target.value), out_dir, None, on_item)
    if target.kind != "gguf":
        raise ValueError(f"cannot run a {target.kind} target")

    opts = dataclasses.replace(engine_options or EmbeddedOptions(), model=Path(target.value))
    engine = await start_embedded(opts)
    try:
        s = dataclasses.replace(settings, base_url=engine.base_url, model=engine.model, api_key=None, key_source=None)
        return await run_quality(items, s, out_dir, EngineInfo.model_validate(engine.record), on_item)
    finally:
        engine.stop()
