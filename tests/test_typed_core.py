"""The typed core holds: figures travel as models, not as loose mappings.

Counts the source lines that pass an untyped mapping (`dict[str, Any]`, `dict[str, object]`,
`Mapping[str, Any]`, `dict[str, JsonValue]`, or a name aliased to one of them such as `JsonObject`
or cli's `Options`, wherever it is used) outside the modules whose job is JSON I/O: request
bodies and server events (client/apis), foreign files before validation (runs/importers), the fake
server's wire format (fakes/fake_*), the JSONL reader and the alias itself (model/files, model/base),
and the gateway's config loader. Run this file to print the count per file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenrace"
MAPPING = r"(?:dict|Mapping)\[str, (?:Any|object|JsonValue)\]"
# `Name = dict[str, Any]` or `Name: TypeAlias = ...`: every line that uses Name passes the mapping too.
ALIAS = re.compile(rf"^(\w+)(?::\s*TypeAlias)?\s*=\s*{MAPPING}")
JSON_IO = ("client/apis/", "runs/importers.py", "fakes/fake_", "model/files.py", "model/base.py", "gateway/config/")
LIMIT = 57  # 56 today (cli's Options alone: 22); the typed core aims for none outside JSON I/O, and a new one needs a reason


def untyped_pattern() -> re.Pattern[str]:
    """The mappings, and every alias of one defined anywhere in the package (JSON I/O included:
    an alias made there still leaks the mapping where it is used)."""
    aliases = sorted(
        {m.group(1) for path in SRC.rglob("*.py") for line in path.read_text().splitlines() if (m := ALIAS.match(line))}
    )
    return re.compile("|".join([MAPPING, *(rf"\b{re.escape(a)}\b" for a in aliases)]))


def untyped_lines() -> dict[str, int]:
    untyped = untyped_pattern()
    counts: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(JSON_IO):
            continue
        lines = path.read_text().splitlines()
        n = sum(1 for line in lines if untyped.search(line) and not line.startswith(("from ", "import ")))
        if n:
            counts[rel] = n
    return counts


def test_untyped_mappings_stay_under_the_limit() -> None:
    counts = untyped_lines()
    assert len(list(SRC.rglob("*.py"))) >= 150  # it scanned the package
    total = sum(counts.values())
    worst = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
    assert total < LIMIT, f"{total} lines pass untyped mappings (limit {LIMIT}); most in {worst}"


def test_aliases_and_json_maps_count() -> None:
    untyped = untyped_pattern()
    assert untyped.search("def f(o: Options) -> None:")  # cli's alias of dict[str, Any]
    assert untyped.search("extra_body: dict[str, JsonValue] | None = None")
    assert untyped.search("x: JsonObject") and not untyped.search("x: dict[str, int]")


if __name__ == "__main__":
    found = untyped_lines()
    for name, n in sorted(found.items(), key=lambda kv: -kv[1]):
        print(f"{n:4d}  {name}")
    print(f"{sum(found.values()):4d}  total (limit {LIMIT})", file=sys.stderr)
