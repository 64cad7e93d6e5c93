"""One engines catalog (tokenrace.engines): serve, monitor, doctor, the engine clock, the prefix
cache and the client's presets all read it, and no other module keeps its own list."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tokenrace import engines
from tokenrace.client.providers import PROVIDERS
from tokenrace.doctor.checks.engines import GPU_ENGINES
from tokenrace.doctor.commands import ENGINES_SCRIPT
from tokenrace.figures.cache import server_cache
from tokenrace.figures.engine_clock import ENGINE_HISTOGRAMS
from tokenrace.model.summary import ServerCache
from tokenrace.serve.engines import LaunchSpec, build_command

SRC = Path(__file__).resolve().parent.parent / "src" / "tokenrace"


def test_the_catalog_is_a_leaf() -> None:
    tree = ast.parse((SRC / "engines.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith("tokenrace")], imported


@pytest.mark.slow
def test_no_other_module_keeps_a_list_named_engines() -> None:
    """serve launches `engines.LAUNCHABLE` and monitor scrapes `engines.WITH_METRICS`: no copies."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            found += [f"{path.relative_to(SRC)}" for t in targets if isinstance(t, ast.Name) and t.id == "ENGINES"]
    assert found == ["engines.py"]


def test_every_user_reads_the_catalog() -> None:
    assert engines.LAUNCHABLE == ("vllm", "sglang", "llamacpp")
    assert engines.WITH_METRICS == {n: e.metrics for n, e in engines.ENGINES.items() if e.metrics}
    assert set(ENGINE_HISTOGRAMS) == {"vllm", "sglang"}
    assert GPU_ENGINES == ("vllm", "sglang")
    for e in engines.ENGINES.values():
        if e.package:
            assert repr(e.package) in ENGINES_SCRIPT
        if e.default_port is not None:  # a preset points where the engine listens by default
            preset = PROVIDERS[e.name]
            assert urlsplit(preset.base_url).port == e.default_port and preset.key_env == e.key_env


@pytest.mark.slow
def test_serve_listens_where_the_preset_looks() -> None:
    """`tokenrace serve --engine sglang` and `tokenrace bench --provider sglang` meet on one port."""
    out = subprocess.run(
        [sys.executable, "-m", "tokenrace", "serve", "--engine", "sglang", "m/x", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    argv = out.stdout.split()
    assert argv[argv.index("--port") + 1] == str(urlsplit(PROVIDERS["sglang"].base_url).port) == "30000"


def test_launch_flags_come_from_the_catalog() -> None:
    for name in engines.LAUNCHABLE:
        launch = engines.ENGINES[name].launch
        assert launch is not None
        argv = build_command(LaunchSpec(name, "m", port=1234, max_model_len=4096), llama_server="/x/llama-server")
        assert argv[argv.index(launch.port) + 1] == "1234"
        assert launch.max_model_len is not None and argv[argv.index(launch.max_model_len) + 1] == "4096"
        assert all(flag in argv for flag in launch.always)


def test_aliases_find_the_entry() -> None:
    llamacpp = engines.engine("llama.cpp")
    assert llamacpp is not None and llamacpp.name == "llamacpp"
    assert engines.engine("LLAMACPP") is llamacpp and engines.engine("nope") is None and engines.engine(None) is None
    text = "# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate 0.25\n"
    assert server_cache("sglang", text, text) == ServerCache(
        source="sglang /metrics sglang:cache_hit_rate (at the end of the run)", hit_rate=0.25
    )


def test_no_other_module_lists_the_engines() -> None:
    listing = re.compile(r"""["']vllm["'][^\n]{0,80}["']sglang["']""")
    found = [
        f"{p.relative_to(SRC)}:{n}"
        for p in sorted(SRC.rglob("*.py"))
        if p.name != "engines.py" or p.parent != SRC
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if listing.search(line)
    ]
    assert not found, found
