"""The environment a benchmark ran in, cheaply: what makes two results comparable.

`collect_environment()` reads the machine (GPUs, driver, CUDA, CPU, RAM, OS) in well under a second
on a machine without a GPU: it only asks NVML or nvidia-smi when an NVIDIA driver is present.
`probe_server_environment()` asks a running server which engine and version it is. Neither raises:
what cannot be learnt is None.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, TypedDict, TypeVar
from urllib.parse import urlsplit

import orjson
from pydantic import JsonValue, RootModel, ValidationError

from tokenrace import __version__
from tokenrace.doctor import parse
from tokenrace.doctor.commands import COMMANDS
from tokenrace.doctor.probe import Probe, SystemProbe
from tokenrace.engines import ENGINES
from tokenrace.engines import engine as catalog_engine
from tokenrace.model.environment import Environment, GpuInfo, TorchInfo
from tokenrace.model.server import ProbedEndpoints, ServedModel, ServerProbe

if TYPE_CHECKING:
    import aiohttp

GPU_TIMEOUT = 3.0
SLOW_TIMEOUT = 60.0
SERVER_TIMEOUT = 2.0
PCI_DEVICES = "/sys/bus/pci/devices"


def collect_environment(probe: Probe | None = None, fast: bool = True) -> Environment:
    """GPU models and count, driver, CUDA, CPU, RAM, OS, Python and tokenrace versions.

    With `fast=False` it also runs the slower probes: nvcc, PyTorch and the engine packages.
    NVML is used only with the real machine (`probe=None`); a given probe is asked through
    nvidia-smi, so recorded fixtures work.
    """
    real = probe is None
    probe = probe or SystemProbe()
    gpus = _gpus(probe, use_nvml=real)
    env = Environment(
        gpus=gpus.gpus,
        gpu_count=len(gpus.gpus),
        driver=gpus.driver,
        cuda=gpus.cuda,
        gpu_source=gpus.source,
        nvidia_pci_devices=_pci_nvidia_count(probe),
        **_host(probe),
    )
    if not fast:
        nvcc = probe.run(COMMANDS["nvcc"], GPU_TIMEOUT)
        torch = probe.run(COMMANDS["torch"], SLOW_TIMEOUT)
        engines = probe.run(COMMANDS["engines"], SLOW_TIMEOUT)
        env.nvcc = parse.nvcc_release(nvcc.output) if nvcc.ok else None
        env.torch = _last_json(torch.stdout, TorchInfo) if torch.ok else None
        versions = _last_json(engines.stdout, _Versions) if engines.ok else None
        env.engines = versions.root if versions else None
    return env


class _GpuFacts(NamedTuple):
    gpus: list[GpuInfo]
    driver: str | None
    cuda: str | None
    source: str | None


_NO_GPU = _GpuFacts([], None, None, None)


def _gpus(probe: Probe, use_nvml: bool) -> _GpuFacts:
    if not _driver_present(probe):
        return _NO_GPU
    return (_nvml() if use_nvml else None) or _smi(probe) or _NO_GPU


def _driver_present(probe: Probe) -> bool:
    if probe.system == "Linux":
        return probe.exists("/proc/driver/nvidia/version") or probe.exists("/dev/nvidiactl")
    return probe.system == "Windows"


def _pci_nvidia_count(probe: Probe) -> int | None:
    if probe.system != "Linux":
        return None
    addresses = probe.listdir(PCI_DEVICES)
    if not addresses:
        return None
    return sum(
        parse.sysfs_is_nvidia_gpu(
            probe.read_file(f"{PCI_DEVICES}/{a}/vendor"), probe.read_file(f"{PCI_DEVICES}/{a}/class")
        )
        for a in addresses
    )


def _nvml() -> _GpuFacts | None:
    try:
        import pynvml  # noqa: PLC0415 - optional at run time: without NVML there are no GPU figures

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver, no device: all mean "ask nvidia-smi"
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20
            bus = _str(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            gpus.append(GpuInfo(name=_str(pynvml.nvmlDeviceGetName(handle)), memory_mib=memory, bus_id=bus))
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
        driver = _str(pynvml.nvmlSystemGetDriverVersion())
        return _GpuFacts(gpus, driver, f"{cuda // 1000}.{cuda % 1000 // 10}", "nvml")
    except Exception:  # noqa: BLE001
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _smi(probe: Probe) -> _GpuFacts | None:
    query = probe.run(COMMANDS["nvidia-smi-query"], GPU_TIMEOUT)
    if not query.ok:
        return None
    gpus = parse.smi_query(query.stdout)
    table = probe.run(COMMANDS["nvidia-smi"], GPU_TIMEOUT)
    driver, cuda = parse.smi_header(table.stdout) if table.ok else (None, None)
    listed = [GpuInfo(name=g.name, memory_mib=g.memory_mib, bus_id=g.bus_id) for g in gpus]
    return _GpuFacts(listed, driver or (gpus[0].driver if gpus else None), cuda, "nvidia-smi")


class _HostFacts(TypedDict):
    cpu_model: str | None
    cpu_cores: int | None
    ram_total_bytes: int | None
    os: str | None
    kernel: str | None
    python: str
    tokenrace: str


def _host(probe: Probe) -> _HostFacts:
    cpuinfo = probe.read_file("/proc/cpuinfo") or ""
    memory = probe.memory()
    kernel = probe.read_file("/proc/sys/kernel/osrelease")
    processors = len(re.findall(r"^processor\s*:", cpuinfo, re.MULTILINE))
    return {
        "cpu_model": parse.cpu_model(cpuinfo) or platform.processor() or platform.machine() or None,
        "cpu_cores": processors or os.cpu_count(),
        "ram_total_bytes": memory.total if memory else None,
        "os": parse.os_release(probe.read_file("/etc/os-release") or "") or platform.platform(),
        "kernel": kernel.strip() if kernel else platform.release(),
        "python": platform.python_version(),
        "tokenrace": __version__,
    }


_Versions = RootModel[dict[str, str | None]]
_Line = TypeVar("_Line", TorchInfo, _Versions)


def _last_json(text: str, shape: type[_Line]) -> _Line | None:
    """The probe's last line, read as `shape`; None when it is not that JSON."""
    lines = text.strip().splitlines()
    try:
        return shape.model_validate_json(lines[-1]) if lines else None
    except ValidationError:
        return None


def _str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ---- the server side -------------------------------------------------------------------------

# Doctor names a local engine by its label in lower case (vllm, sglang, llama.cpp, ollama); an
# `owned_by` in /v1/models may be any of the catalog's names for it.
OWNERS = {
    **{alias.lower(): e.label.lower() for e in ENGINES.values() for alias in (e.name, *e.aliases)},
    "openai": "openai",
    "system": "openai",
}
KEPT_HEADERS = ("server", "openai-version", "openai-organization", "x-groq-region", "via", "x-request-id")


async def probe_server_environment(
    session: aiohttp.ClientSession, base_url: str, hosted: Mapping[str, str] | None = None
) -> ServerProbe:
    """Which engine serves `base_url` and its version, from /v1/models, /version and headers.

    `base_url` is the OpenAI-style base (`http://host:8000/v1` or `http://host:8000`). `hosted` maps
    a hosted API's host to its provider name (the client's presets, `client.providers.HOSTED_HOSTS`;
    doctor, a leaf, keeps no list of its own). The session's own headers (an API key) are used as
    they are. Never raises; unknown fields are None.
    """
    root, api = _roots(base_url)
    models, version = await asyncio.gather(_get(session, f"{api}/models"), _get(session, f"{root}/version"))
    data = models.body.get("data") if isinstance(models.body, dict) else None
    entries = [_served_model(m) for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    engine = _guess_engine(base_url, entries, models.headers, hosted or {})
    engine_version = await _engine_version(session, root, engine, version)
    return ServerProbe(
        engine=engine,
        engine_version=engine_version,
        models=entries,
        max_model_len=next((m.max_model_len for m in entries if m.max_model_len), None),
        headers={k: v for k, v in models.headers.items() if k in KEPT_HEADERS or k.startswith("x-groq")},
        endpoints=ProbedEndpoints(models=models.status, version=version.status),
    )


class _Reply:
    """A GET's status, its JSON body before it is read into a model, and its headers (lower case)."""

    def __init__(
        self, status: int | None = None, body: JsonValue = None, headers: dict[str, str] | None = None
    ) -> None:
        self.status, self.body, self.headers = status, body, headers or {}

    def field(self, key: str) -> JsonValue:
        return self.body.get(key) if isinstance(self.body, dict) else None


async def _get(session: aiohttp.ClientSession, url: str) -> _Reply:
    import aiohttp  # noqa: PLC0415 - import cost: collect_environment stays cheap to import; aiohttp only to probe a server

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=SERVER_TIMEOUT)) as resp:
            raw = await resp.read()
            headers = {k.lower(): v for k, v in resp.headers.items()}
            return _Reply(resp.status, _json_or_none(raw) if resp.status == 200 else None, headers)
    except Exception:  # noqa: BLE001 - unreachable, refused, timed out, bad TLS: all mean "unknown"
        return _Reply()


def _json_or_none(raw: bytes) -> JsonValue:
    try:
        value: JsonValue = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value


def _roots(base_url: str) -> tuple[str, str]:
    """(server root, OpenAI API base) from what the user gave."""
    base = base_url.rstrip("/")
    api = base if base.endswith("/v1") else f"{base}/v1"
    return api[: -len("/v1")], api


def _guess_engine(
    base_url: str, entries: list[ServedModel], headers: dict[str, str], hosted: Mapping[str, str]
) -> str | None:
    host = urlsplit(base_url).hostname or ""
    for domain, name in hosted.items():
        if host == domain or host.endswith(f".{domain}"):
            return name
    if any(k.startswith("x-groq") for k in headers):
        return "groq"
    if "llama.cpp" in headers.get("server", "").lower():
        return "llama.cpp"
    owners = [OWNERS.get((m.owned_by or "").lower()) for m in entries]
    if "openai-version" in headers:
        return "openai"
    return next((owner for owner in owners if owner), None)


async def _engine_version(session: aiohttp.ClientSession, root: str, engine: str | None, version: _Reply) -> str | None:
    if engine in ("vllm", None) and version.field("version"):
        return str(version.field("version"))
    entry = catalog_engine(engine)
    where = entry.version_endpoint if entry is not None else None
    if where is None or where[0] == "/version":  # /version was read above
        return None
    path, key = where
    reply = await _get(session, f"{root}{path}")
    found = reply.field(key)
    if found is None:
        found = version.field("version")
    return None if found is None else str(found)


def _served_model(entry: dict[str, JsonValue]) -> ServedModel:
    """One /v1/models entry: text fields as text, the context length when it is a number."""
    meta = entry.get("meta")
    return ServedModel(
        id=_text(entry.get("id")),
        owned_by=_text(entry.get("owned_by")),
        max_model_len=_count(entry.get("max_model_len")) or _count(entry.get("context_window")),
        meta=meta if isinstance(meta, dict) else None,
    )


def _text(value: JsonValue) -> str | None:
    return None if value is None else str(value)


def _count(value: JsonValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
