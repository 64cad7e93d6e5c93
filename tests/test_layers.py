"""The package layering in docs/design.md, checked on every import statement (function-level ones too):
between packages, between the leaves, and between the modules inside gateway/ and doctor/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenrace"

# Modules that import nothing else of tokenrace (or only each other): importable from anywhere.
# `model` (the run's typed models) is the pipeline's lowest layer: every package reads it.
BASE = {
    "",
    "aio",
    "errors",
    "stats",
    "paths",
    "engines",
    "text_agreement",
    "redact",
    "model",
    "table",
    "units",
    "__version__",
}
# The leaves import only BASE and the leaves listed here: the planner sizes doctor's model check,
# and serve asks doctor for the GPU and the planner whether the model fits. monitor and fakes use
# no other leaf. Anything not listed is against the layering, so a new edge is a decision.
LEAVES: dict[str, set[str]] = {
    "plan": set(),
    "doctor": {"plan"},
    "serve": {"doctor", "plan"},
    "monitor": set(),
    "fakes": set(),
}
PIPELINE = ["client", "load", "figures", "runs", "sweep", "quality", "claim", "report", "cli"]
RANK = {name: i for i, name in enumerate(PIPELINE)}
RANK["quality"] = RANK["sweep"]  # quality and sweep sit side by side: neither imports the other
# claim runs the battery out of sweeps and a quality pass: it sits just above both, below report
ALLOWED_EXTRA = {"gateway": {"client", "stats"}}  # the gateway uses the client and stats only

# Inside a package: tiers, lowest first. A module imports only modules of lower tiers (its package's
# __init__, which re-exports, may import any of them). A module not listed fails the test, so a new
# one takes a place here.
INSIDE: dict[str, list[set[str]]] = {
    "gateway": [
        {
            "body",
            "clock",
            "views",
        },  # the request body as the gateway reads it; its clock; the typed state it shows and shares
        {"headers", "http", "metrics", "routing", "stream", "telemetry", "upstream", "watchdog", "yamlpos"},
        {"kvblocks", "prompt_tokens"},  # the blocks each engine holds (its KV events); a prompt's token ids
        {"config.schema"},
        {"config.load"},
        {"config.secrets"},
        {"config"},
        {"breaker", "canary", "ratelimit"},
        {"runtime"},
        {"follow"},  # a task per followed backend (the scrapes', the KV events')
        {"scrape", "kvevents", "shared"},
        {"context"},  # the small protocols the request path receives instead of the app
        {"shadow", "attempt"},  # one attempt at one backend
        {"failover"},  # attempts over the route's backends
        {"admission"},  # the checks before a request is taken
        {"admin"},
        {"app"},
        {"server", "workers"},  # one process's loop; a worker of `--workers N` (its own loop, the shared port)
        {"supervisor"},  # starts and watches the workers
    ],
    "doctor": [
        {"commands", "knowledge", "parse", "result", "model_size"},
        {"probe"},
        {"environment", "registry"},
        {"checks.common"},
        {"checks.container", "checks.engines", "checks.gpu", "checks.kernel", "checks.model"},
        {"checks.cuda", "checks.smi"},
        {"checks"},
        {"runner", "render"},
    ],
}
# The upward edge: doctor's registry imports the checks package on first use, which registers every
# check into it (a check module imports the registry to register itself).
INSIDE_EXCEPTIONS = {("doctor", "registry", "checks")}
MIN_FILES = 150  # src/tokenrace holds more than this many modules: fewer means the scan went wrong


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imported_modules(path: Path) -> set[str]:
    """Every tokenrace module `path` imports, as a dotted name (`from tokenrace.x import y` gives
    both `tokenrace.x` and `tokenrace.x.y`: y may be a submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tokenrace":
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tokenrace")
    return found


def _imports(path: Path) -> set[str]:
    """The top-level packages (or base modules) of tokenrace that `path` imports."""
    return {_package(name) for name in _imported_modules(path)}


def allowed(src: str, dst: str) -> bool:
    if dst == src or dst in BASE or src in ("cli", "__main__"):
        return True
    if src in LEAVES:
        return dst in LEAVES[src]
    if src in ALLOWED_EXTRA:
        return dst in ALLOWED_EXTRA[src]
    if src in RANK:
        return dst in LEAVES or (dst in RANK and RANK[dst] < RANK[src])
    return False


def _sources() -> list[Path]:
    paths = sorted(SRC.rglob("*.py"))
    assert len(paths) >= MIN_FILES, f"scanned {len(paths)} files under {SRC}"
    return paths


@pytest.mark.slow
def test_every_import_goes_down_the_layers() -> None:
    wrong = []
    for path in _sources():
        rel = path.relative_to(SRC)
        src = rel.parts[0] if len(rel.parts) > 1 else rel.stem.replace("__init__", "")
        for dst in sorted(_imports(path)):
            if not allowed(src, dst):
                wrong.append(f"{rel}: {src or 'tokenrace'} -> {dst}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def _tier(package: str, module: str) -> int | None:
    return next((i for i, tier in enumerate(INSIDE[package]) if module in tier), None)


def _inside(package: str, path: Path) -> str:
    rel = path.relative_to(SRC / package).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _modules_inside(package: str) -> dict[str, Path]:
    return {_inside(package, p): p for p in sorted((SRC / package).rglob("*.py"))}


def test_modules_inside_a_package_import_downwards() -> None:
    wrong, unplaced = [], []
    for package in INSIDE:
        modules = _modules_inside(package)
        assert len(modules) >= 10, f"scanned {len(modules)} modules in {package}/"
        for module, path in modules.items():
            if module == "":
                continue  # the package's __init__ re-exports
            tier = _tier(package, module)
            if tier is None:
                unplaced.append(f"{package}/{module}")
                continue
            prefix = f"tokenrace.{package}."
            targets = {n.removeprefix(prefix) for n in _imported_modules(path) if n.startswith(prefix)}
            for dst in sorted(t for t in targets if t in modules and t != module):
                dst_tier = _tier(package, dst)
                if (package, module, dst) not in INSIDE_EXCEPTIONS and (dst_tier is None or dst_tier >= tier):
                    wrong.append(f"{package}/{module} -> {dst}")
    assert not unplaced, "modules without a tier in INSIDE (give them one):\n" + "\n".join(unplaced)
    assert not wrong, "imports against the order inside the package:\n" + "\n".join(wrong)


def test_every_tier_names_a_real_module() -> None:
    for package, tiers in INSIDE.items():
        modules = set(_modules_inside(package))
        assert not [m for tier in tiers for m in tier if m not in modules], package


def test_the_rule_itself() -> None:
    assert allowed("load", "client") and not allowed("client", "load")
    assert allowed("report", "runs") and not allowed("runs", "report")
    assert allowed("figures", "plan") and not allowed("plan", "figures")
    assert not allowed("sweep", "quality") and not allowed("quality", "sweep")
    assert allowed("claim", "sweep") and allowed("claim", "quality") and not allowed("sweep", "claim")
    assert allowed("report", "claim") and not allowed("claim", "report")
    assert allowed("gateway", "client") and not allowed("gateway", "load")
    assert allowed("serve", "plan") and not allowed("plan", "serve") and not allowed("doctor", "serve")
    assert not allowed("monitor", "doctor") and not allowed("fakes", "plan")
    assert allowed("fakes", "aio") and allowed("gateway", "aio")
    assert allowed("client", "model") and allowed("figures", "model") and allowed("monitor", "model")
    assert not allowed("model", "client") and not allowed("model", "figures") and allowed("model", "redact")
