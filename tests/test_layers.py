"""The package layering in docs/design.md, checked on every import statement (function-level ones too)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenrace"

# The base: modules that import nothing else of tokenrace (or only each other), importable from
# anywhere. `model` (the run's typed models) is the pipeline's lowest layer: every package reads it.
BASE = {"", "errors", "stats", "paths", "engines", "text_agreement", "redact", "model", "__version__"}
LEAVES = {"plan", "doctor", "monitor", "serve", "testing"}  # import only BASE and other leaves
PIPELINE = ["client", "load", "figures", "runs", "sweep", "quality", "claim", "report", "cli"]
RANK = {name: i for i, name in enumerate(PIPELINE)}
RANK["quality"] = RANK["sweep"]  # quality and sweep sit side by side: neither imports the other
# claim runs the battery out of sweeps and a quality pass: it sits just above both, below report
ALLOWED_EXTRA = {"gateway": {"client", "stats"}}  # the gateway uses the client and stats only


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tokenrace":
            if node.module == "tokenrace":
                found.update(_package(f"tokenrace.{a.name}") for a in node.names)
            else:
                found.add(_package(node.module))
        elif isinstance(node, ast.Import):
            found.update(_package(a.name) for a in node.names if a.name.startswith("tokenrace."))
    return found


def allowed(src: str, dst: str) -> bool:
    if dst == src or dst in BASE or src in ("cli", "__main__"):
        return True
    if src in LEAVES:
        return dst in LEAVES
    if src in ALLOWED_EXTRA:
        return dst in ALLOWED_EXTRA[src]
    if src in RANK:
        return dst in LEAVES or (dst in RANK and RANK[dst] < RANK[src])
    return False


def test_every_import_goes_down_the_layers() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        src = rel.parts[0] if len(rel.parts) > 1 else rel.stem.replace("__init__", "")
        for dst in sorted(_imports(path)):
            if not allowed(src, dst):
                wrong.append(f"{rel}: {src or 'tokenrace'} -> {dst}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_the_rule_itself() -> None:
    assert allowed("load", "client") and not allowed("client", "load")
    assert allowed("report", "runs") and not allowed("runs", "report")
    assert allowed("figures", "plan") and not allowed("plan", "figures")
    assert not allowed("sweep", "quality") and not allowed("quality", "sweep")
    assert allowed("claim", "sweep") and allowed("claim", "quality") and not allowed("sweep", "claim")
    assert allowed("report", "claim") and not allowed("claim", "report")
    assert allowed("gateway", "client") and not allowed("gateway", "load")
    assert allowed("client", "model") and allowed("figures", "model") and allowed("monitor", "model")
    assert not allowed("model", "client") and not allowed("model", "figures") and allowed("model", "redact")
