"""The inference engines installed here, and their versions."""

from __future__ import annotations

import re

import orjson

from tokenrace.doctor.registry import Context, Finding, check, ok, skip, warn
from tokenrace.engines import ENGINES

GPU_ENGINES = tuple(name for name, e in ENGINES.items() if e.needs_gpu)


@check("engines", "Installed inference engines")
def engines(ctx: Context) -> Finding:
    versions = engine_versions(ctx)
    found = {name: version for name, version in versions.items() if version}
    if not found:
        return skip(
            "no local engine installed (vLLM, SGLang, llama.cpp); fine for benchmarking a hosted API", **versions
        )
    listing = ", ".join(f"{name} {version}" for name, version in found.items())
    needs_gpu = [name for name in GPU_ENGINES if name in found]
    if needs_gpu and ctx.gpu_on_bus() is False:
        cause = f"{' and '.join(needs_gpu)} run on CUDA GPUs; this machine has no NVIDIA GPU."
        fix = "Serve them on a GPU machine; here, benchmark a hosted API or a CPU engine (llama.cpp) instead."
        return warn(f"{listing} installed, but there is no GPU to serve with", cause, fix, **versions)
    return ok(listing, **versions)


def engine_versions(ctx: Context) -> dict[str, str | None]:
    res = ctx.run("engines")
    try:
        packages = orjson.loads(res.stdout.strip().splitlines()[-1]) if res.ok and res.stdout.strip() else {}
    except orjson.JSONDecodeError:
        packages = {}
    versions: dict[str, str | None] = {
        e.package.replace("_", "-"): packages.get(e.package) for e in ENGINES.values() if e.package
    }
    versions["llama-server"] = llama_server_version(ctx)
    return versions


def llama_server_version(ctx: Context) -> str | None:
    res = ctx.run("llama-server")
    if res.missing or res.timed_out:
        return None
    match = re.search(r"version:\s*(\d+)\s*\(([0-9a-f]+)\)", res.output)
    return f"b{match.group(1)} ({match.group(2)})" if match else "installed (version unknown)"
