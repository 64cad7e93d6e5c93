"""The device and model catalogs (hardware.json, models.json), name matching, and local model files."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.plan import probe
from tokenrace.plan.modelspec import HFConfig, ModelSpec, from_hf_config, read_config_file, read_gguf

GIB = 2**30
FP16_KEYS = ("fp16", "bf16")
# Suffixes that name a fine-tune of the same architecture: they do not change the plan.
_VARIANT_SUFFIX = re.compile(r"[-_ ](instruct|it|chat|hf|base|v\d+(\.\d+)?-instruct)$")


@dataclass(frozen=True)
class Link:
    """One kind of interconnect as one device sees it.

    topology "switch": one port of `bandwidth` each way, any peer one hop away (NVSwitch, PCIe, InfiniBand);
    "direct": `count` links of `bandwidth` each way, each to one peer (Groq C2C, Infinity Fabric).
    """

    name: str
    label: str
    topology: str  # switch | direct
    count: int
    bandwidth_bytes_per_s: float  # each way: per port (switch) or per link (direct)
    latency_s: float | None  # one hop; None: no source gives it
    scope: str  # node | cluster
    source: str
    max_group: int | None = None

    @property
    def hop_latency_s(self) -> float:
        """Unknown latency counts as 0: that only raises a bound."""
        return self.latency_s or 0.0


@dataclass(frozen=True)
class Hardware:
    """One device: an accelerator, an SRAM chip, or a CPU with its DRAM."""

    name: str
    kind: str  # gpu | tpu | sram | cpu
    memory_bytes: int
    bandwidth_bytes_per_s: float
    flops: Mapping[str, float]  # dense FLOP/s (or OP/s) by dtype: fp16, bf16, fp8, int8, fp32
    source: str
    memory_label: str = ""
    aliases: tuple[str, ...] = ()
    devices_per_node: int = 8
    measured: bool = False
    note: str = ""
    links: tuple[Link, ...] = ()  # preferred first; node links before cluster links
    tdp_w: float | None = None
    tdp_source: str = ""

    def link(self, name: str | None = None) -> Link | None:
        """A link by name (or the first node link); None for a device without links."""
        if name is None:
            return next((x for x in self.links if x.scope == "node"), None)
        for x in self.links:
            if x.name == name or _norm(x.name) == _norm(name):
                return x
        known = ", ".join(x.name for x in self.links) or "none"
        raise InvalidInput("link", f"{self.name} has no {name!r} link; its links: {known}")

    def cluster_link(self) -> Link | None:
        return next((x for x in self.links if x.scope == "cluster"), None)

    def flops_for(self, dtype: str) -> tuple[float | None, str]:
        """Peak for `dtype`; a dtype the device lists no figure for runs on its 16-bit units (dequantized)."""
        if dtype in self.flops:
            return self.flops[dtype], dtype
        for key in FP16_KEYS:
            if key in self.flops:
                return self.flops[key], key
        return None, dtype


def _norm(name: str) -> str:
    """'meta-llama/Llama-3.1-8B-Instruct' -> 'llama318b'; 'RTX 4090' -> 'rtx4090'."""
    text = name.strip().lower().rsplit("/", 1)[-1]
    while True:
        stripped = _VARIANT_SUFFIX.sub("", text)
        if stripped == text:
            break
        text = stripped
    return re.sub(r"[^a-z0-9]", "", text)


class _Row(BaseModel):
    """A catalog row: unknown keys are refused, so a misspelt key in the JSON fails the catalog's tests."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _NamedRow(_Row):
    name: str
    aliases: tuple[str, ...] = ()
    source: str


class LinkRow(_Row):
    """hardware.json `links`: one kind of interconnect."""

    label: str
    topology: str  # switch | direct
    count: int
    gb_s: float  # each way, per port or per link
    latency_us: float | None  # one hop; null: no source gives it
    scope: str  # node | cluster
    source: str
    max_group: int | None = None


class HardwareRow(_NamedRow):
    """hardware.json `devices`: one device, in the units its sources use."""

    kind: str  # gpu | tpu | sram | cpu
    memory_gib: float | None = None
    memory_bytes: int | None = None  # exact bytes, where GiB would round (SRAM)
    memory_label: str = ""
    bandwidth_tb_s: float | None = None  # None only for the measured CPU
    tflops: dict[str, float] = Field(default_factory=dict)
    links: tuple[str, ...] = ()
    devices_per_node: int | None = None
    tdp_w: float | None = None
    tdp_source: str = ""
    measured: bool = False  # this machine's CPU: measured when asked for


class ModelRow(_NamedRow):
    """models.json `models`: a text decoder's config in config.json form, with its published size."""

    label: str | None = None
    params_published: float | None = None
    active_params_published: float | None = None
    config: HFConfig


class PublishedRow(_Row):
    """published.json `points`: a decode speed someone published, with its configuration and source."""

    id: str
    label: str
    model: str  # catalog name
    hardware: str  # catalog name
    devices: int | None = None  # None: the fewest that fit
    precision: str
    context: int
    input_tokens: int | None = None
    concurrency: int = 1
    tok_s: float  # per stream, while decoding
    figure: str
    speculative: bool = False
    tokens_per_step: float | None = None
    source_kind: str  # primary | secondary
    source: str
    low_share_reason: str | None = None
    kv_dtype: str = "fp16"


class HardwareFile(_Row):
    comment: str = Field("", alias="_comment")
    links: dict[str, LinkRow]
    devices: tuple[HardwareRow, ...]

    @model_validator(mode="before")
    @classmethod
    def _no_link_comments(cls, data: object) -> object:
        """`links` keeps a `_comment` of its own beside the links."""
        if isinstance(data, dict) and isinstance(data.get("links"), dict):
            links = {k: v for k, v in data["links"].items() if not k.startswith("_")}
            return {**data, "links": links}
        return data


class ModelsFile(_Row):
    comment: str = Field("", alias="_comment")
    models: tuple[ModelRow, ...]


class UnboundedRow(_Row):
    """published.json `unbounded`: a speed a vendor published on hardware the planner cannot bound (a
    chip outside the catalog, or one whose memory system the planner does not describe), kept with its
    source and the reason, so that `plan` shows it beside a model's bound without a share."""

    id: str
    label: str
    model: str  # catalog name
    hardware: str  # the vendor's name for it, not a catalog row
    precision: str  # as the source states it
    tok_s: float  # per stream, while decoding
    figure: str
    source_kind: str  # primary | secondary
    source: str
    no_bound: str  # why the planner gives no bound for it


class PublishedFile(_Row):
    comment: str = Field("", alias="_comment")
    points: tuple[PublishedRow, ...]
    unbounded: tuple[UnboundedRow, ...] = ()


F = TypeVar("F", HardwareFile, ModelsFile, PublishedFile)
R = TypeVar("R", bound=_NamedRow)


def _match(query: str, rows: Sequence[R], what: str) -> R:
    """Exact match on a name or alias after normalising (case, punctuation, an org/ prefix, -instruct
    style suffixes); otherwise an error listing close names. A partial name is never guessed at:
    'gemma-4' could be any Gemma 4 size."""
    key = _norm(query)
    index = {_norm(n): row for row in rows for n in (row.name, *row.aliases)}
    if key in index:
        return index[key]
    partial = {id(row): row for k, row in index.items() if len(key) >= 3 and (key in k or (len(k) >= 4 and k in key))}
    close = list(dict.fromkeys([row.name for row in partial.values()] + _close(query, rows)))[:5]
    hint = f"; close matches: {', '.join(close)}" if close else f"; known: {', '.join(row.name for row in rows)}"
    raise UsageError(f"unknown {what} {query!r}{hint} (tokenrace plan --list shows the catalog)")


def _close(query: str, rows: Sequence[_NamedRow]) -> list[str]:
    by_key: dict[str, str] = {}
    for row in rows:
        for n in (row.name, *row.aliases):
            by_key.setdefault(_norm(n), row.name)
    keys = difflib.get_close_matches(_norm(query), list(by_key), n=6, cutoff=0.5)
    return list(dict.fromkeys(by_key[k] for k in keys))[:4]


def _data(filename: str, shape: type[F]) -> F:
    text = resources.files("tokenrace.plan").joinpath(filename).read_text(encoding="utf-8")
    return shape.model_validate_json(text)


@functools.cache
def _hardware_file() -> HardwareFile:
    return _data("hardware.json", HardwareFile)


@functools.cache
def _models_file() -> ModelsFile:
    return _data("models.json", ModelsFile)


@functools.cache
def _published_file() -> PublishedFile:
    return _data("published.json", PublishedFile)


def hardware_rows() -> list[HardwareRow]:
    return list(_hardware_file().devices)


def model_rows() -> list[ModelRow]:
    return list(_models_file().models)


def published_rows() -> list[PublishedRow]:
    return list(_published_file().points)


def unbounded_rows() -> list[UnboundedRow]:
    return list(_published_file().unbounded)


# ---------------------------------------------------------------------------------------------
# Hardware


def link_rows() -> dict[str, LinkRow]:
    return dict(_hardware_file().links)


@functools.cache
def load_link(name: str) -> Link:
    row = link_rows()[name]
    return Link(
        name=name,
        label=row.label,
        topology=row.topology,
        count=row.count,
        bandwidth_bytes_per_s=row.gb_s * 1e9,
        latency_s=None if row.latency_us is None else row.latency_us * 1e-6,
        scope=row.scope,
        source=row.source,
        max_group=row.max_group,
    )


def _hardware_from_row(row: HardwareRow) -> Hardware:
    memory = row.memory_bytes if row.memory_bytes is not None else int((row.memory_gib or 0) * GIB)
    if row.bandwidth_tb_s is None:
        raise ValueError(f"hardware.json: {row.name} has no bandwidth_tb_s")
    return Hardware(
        name=row.name,
        kind=row.kind,
        memory_bytes=memory,
        bandwidth_bytes_per_s=row.bandwidth_tb_s * 1e12,
        flops={k: v * 1e12 for k, v in row.tflops.items()},
        source=row.source,
        memory_label=row.memory_label,
        aliases=row.aliases,
        devices_per_node=row.devices_per_node or (1 if row.kind == "cpu" else 8),
        links=tuple(load_link(name) for name in row.links),
        tdp_w=row.tdp_w or None,
        tdp_source=row.tdp_source,
    )


@functools.cache
def _measured_cpu() -> Hardware:
    """This machine's CPU: bandwidth probed once per process (see probe.py), memory from the OS."""
    row = next(r for r in hardware_rows() if r.measured)
    bandwidth = probe.measure_cpu_bandwidth()
    threads = probe.usable_cpus()
    model = probe.cpu_model_name() or "unknown CPU"
    return Hardware(
        name="cpu",
        kind="cpu",
        memory_bytes=probe.physical_memory_bytes() or 0,
        bandwidth_bytes_per_s=bandwidth,
        flops={},
        source=f"{row.source}: {bandwidth / 1e9:.1f} GB/s with {threads} threads",
        memory_label=f"{model}, {threads} threads",
        aliases=row.aliases,
        devices_per_node=1,
        measured=True,
        note="CPU compute peak is not measured (AMX/VNNI int8 paths make a numpy probe no bound): decode and TTFT "
        "bounds are memory bounds; the TTFT bound counts only reading the weights once, so it is loose",
    )


def load_hardware(name: str) -> Hardware:
    """A catalog device by name or alias (fuzzy), or 'cpu': this machine, its bandwidth measured once."""
    row = _match(name, hardware_rows(), "hardware")
    return _measured_cpu() if row.measured else _hardware_from_row(row)


def catalog_hardware(include_measured: bool = False) -> list[Hardware]:
    return [load_hardware(r.name) for r in hardware_rows() if include_measured or not r.measured]


# ---------------------------------------------------------------------------------------------
# Models

MODEL_FILE_SUFFIXES = (".gguf", ".json")


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~")) or text.lower().endswith(MODEL_FILE_SUFFIXES)


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False


def _load_local(path: Path) -> ModelSpec:
    if path.is_dir():
        if (path / "config.json").is_file():
            return read_config_file(path)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return read_gguf(ggufs[0])
        found = f"{len(ggufs)} .gguf files" if ggufs else "no config.json or .gguf"
        raise InvalidInput("model", f"{path} holds {found}; name the file")
    if _is_gguf(path):
        return read_gguf(path)
    if path.suffix.lower() == ".gguf":
        raise InvalidInput("model", f"{path} does not start with the GGUF magic bytes")
    return read_config_file(path)


@functools.cache
def _catalog_model(name: str) -> ModelSpec:
    row = next(r for r in model_rows() if r.name == name)
    return from_hf_config(
        row.config, name=row.label or row.name, source=row.source, params_published=row.params_published
    )


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog model (fuzzy: 'llama-3.1-8b', 'meta-llama/Llama-3.1-8B-Instruct'), a config.json or a
    model folder, or a .gguf file (sizes from its tensors, quantization from its metadata)."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return _load_local(path)
    if _looks_like_path(name_or_path):
        raise InvalidInput("model", f"no such file or folder: {name_or_path}")
    return _catalog_model(_match(name_or_path, model_rows(), "model").name)


def catalog_models() -> list[ModelSpec]:
    return [_catalog_model(r.name) for r in model_rows()]
