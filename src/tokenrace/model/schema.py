"""JSON Schema files for the saved runs, generated from the models (`python -m tokenrace.model.schema [DIR]`).

Other tools read records.jsonl, summary.json, manifest.json, sweep.json, profile.json, quality.json
and claim.json against these schemas, the way vLLM bench's result JSON is read; a test regenerates
them and fails when the committed copies in docs/schema/ are stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenrace.model.files import FILE_MODELS, FILE_VERSIONS, SCHEMA_VERSION

DEFAULT_DIR = Path("docs/schema")


def schema_name(file_name: str) -> str:
    """`summary.json` -> `summary.schema.json`; `records.jsonl` -> `records.line.schema.json`."""
    stem, _, ext = file_name.partition(".")
    return f"{stem}.line.schema.json" if ext == "jsonl" else f"{stem}.schema.json"


def schemas() -> dict[str, str]:
    """{schema file name: its text}, deterministic (sorted keys, two-space indent, final newline)."""
    out = {}
    for file_name, model in FILE_MODELS.items():
        schema = model.model_json_schema(mode="serialization")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        version = FILE_VERSIONS.get(file_name, SCHEMA_VERSION)
        schema["$comment"] = f"tokenrace {file_name}, schema_version {version}; generated from {model.__name__}"
        out[schema_name(file_name)] = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return out


def write(directory: Path = DEFAULT_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schemas().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR):
        print(p)
