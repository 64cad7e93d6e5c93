"""GPU energy over a window: NVML on this machine, or a DCGM exporter's page for a remote server.

Each GPU's total-energy counter (NVML's `nvmlDeviceGetTotalEnergyConsumption`, DCGM's
`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, both in mJ) is read at the start and at the end of the
window; the difference is the energy. A GPU without the counter (older boards; an exporter whose
field list leaves it out) has its power (NVML's `nvmlDeviceGetPowerUsage` in mW,
`DCGM_FI_DEV_POWER_USAGE` in W) sampled through the window and integrated (trapezoids), and its
figure says so (`method: power_samples`). A counter that went backwards (a driver or exporter
restart) leaves that GPU's energy None, with the reason.

`EnergyMeter(source)` does the timing; the sources only read. NVML is handed in as a module object
(`NvmlEnergy(nvml)`), so tests use a fake `pynvml` with the same functions.

The counter is the whole board's: NVML also says which processes ran on each GPU at either end of
the window, and `sharing_warnings` says when the run was charged for a process other than the
server's, or when the server ran on none of the GPUs measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from tokenrace.model.summary import RunWarning
from tokenrace.monitor.gpu import FUNCTION_NOT_FOUND, NOT_SUPPORTED, SamplerUnavailable
from tokenrace.monitor.server import labeled_samples

DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since the driver loaded, per GPU
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"  # W, per GPU
POWER_INTERVAL_S = 0.25


class EnergyUnavailable(Exception):
    """The source cannot give energy (no GPU, no answer, no energy or power field): the reason."""


@dataclass(frozen=True, slots=True)
class GpuReading:
    gpu: str
    name: str | None
    energy_mj: float | None  # the cumulative counter; None: this GPU has none
    power_w: float | None
    pids: tuple[int, ...] | None = None  # the processes running on it (NVML); None: not known


class EnergySource(Protocol):
    label: str  # "nvml" or the exporter's URL
    interval_s: float  # how often to sample power where a GPU has no energy counter

    async def open(self) -> None: ...
    # `pids`: also list each GPU's processes (at the window's ends; not for every power sample).
    async def read(self, pids: bool = False) -> list[GpuReading]: ...
    async def close(self) -> None: ...


@dataclass(slots=True)
class GpuWindow:
    gpu: str
    name: str | None
    joules: float | None
    mean_power_w: float | None
    method: str | None
    samples: int | None = None
    reason: str | None = None
    pids: list[int] | None = None  # processes on it at the start or the end; None: not known


@dataclass(slots=True)
class EnergyWindow:
    """What the meter saw between start and stop."""

    source: str
    window_s: float | None
    gpus: list[GpuWindow] = field(default_factory=list)
    reason: str | None = None  # why there is no figure at all
    warnings: list[RunWarning] = field(default_factory=list)


class NvmlEnergy:
    """This machine's GPUs through NVML (nvidia-ml-py's `pynvml`, or a fake with its functions)."""

    label = "nvml"
    interval_s = POWER_INTERVAL_S

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml
        self._handles: list[Any] = []
        self._names: list[str] = []
        self._no_counter: set[int] = set()
        self._no_power: set[int] = set()
        self._no_processes: set[int] = set()

    async def open(self) -> None:
        if self._nvml is None:
            try:
                import pynvml  # noqa: PLC0415 - optional at run time: NVML may be missing, and the meter then says so
            except ImportError:
                raise EnergyUnavailable("nvidia-ml-py is not installed") from None
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))]
            self._names = [_text(nvml.nvmlDeviceGetName(h)) for h in self._handles]
        except Exception as exc:  # noqa: BLE001 - any NVML failure here means: no GPU energy on this machine
            raise EnergyUnavailable(f"NVML unavailable ({type(exc).__name__}: {exc})") from None
        if not self._handles:
            raise EnergyUnavailable("NVML found no GPU")

    async def read(self, pids: bool = False) -> list[GpuReading]:
        # In a thread: NVML's calls take milliseconds, which the benchmark's event loop must not lose.
        return await asyncio.to_thread(lambda: [self._reading(i, h, pids) for i, h in enumerate(self._handles)])

    def _reading(self, index: int, handle: Any, pids: bool) -> GpuReading:
        nvml = self._nvml
        assert nvml is not None
        energy = self._call(index, self._no_counter, nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        power = None
        if energy is None:  # the power is only needed where there is no counter
            mw = self._call(index, self._no_power, nvml.nvmlDeviceGetPowerUsage, handle)
            power = None if mw is None else float(mw) / 1000.0
        # The listing call is absent from old bindings.
        listing = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses", None) if pids else None
        procs = None if listing is None else self._call(index, self._no_processes, listing, handle)
        found = None if procs is None else tuple(sorted({int(p.pid) for p in procs}))
        return GpuReading(str(index), self._names[index], None if energy is None else float(energy), power, found)

    @staticmethod
    def _call(index: int, unsupported: set[int], fn: Any, handle: Any) -> Any:
        if index in unsupported:
            return None
        try:
            return fn(handle)
        except Exception as exc:
            if getattr(exc, "value", None) in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                unsupported.add(index)
                return None
            raise

    async def close(self) -> None:
        if self._nvml is not None and self._handles:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        self._handles = []


class DcgmEnergy:
    """A DCGM exporter's page (`--dcgm-url`): one energy counter and one power gauge per GPU."""

    interval_s = 1.0  # the exporter refreshes its fields every collection interval (-c, 30 s by default)

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.label = url
        self.url = url
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1), timeout=aiohttp.ClientTimeout(total=self.timeout_s)
        )

    async def read(self, pids: bool = False) -> list[GpuReading]:  # an exporter lists no processes
        assert self._session is not None, "open() first"
        try:
            async with self._session.get(self.url) as resp:
                if resp.status != 200:
                    raise EnergyUnavailable(f"{self.url} answered HTTP {resp.status}")
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc).strip() else type(exc).__name__
            raise EnergyUnavailable(f"{self.url} did not answer ({detail})") from None
        return parse_dcgm(text, self.url)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def parse_dcgm(text: str, url: str = "the page") -> list[GpuReading]:
    """Per-GPU energy (mJ) and power (W) of a DCGM exporter page. MIG instances (rows with a
    `GPU_I_ID` label) are skipped: energy is the whole GPU's."""
    try:
        # `_total` too: prometheus-client's parser adds it to the samples of a typed counter.
        samples = labeled_samples(text, frozenset({DCGM_ENERGY, f"{DCGM_ENERGY}_total", DCGM_POWER}))
    except ValueError as exc:
        raise EnergyUnavailable(f"{url} is not Prometheus text ({exc})") from None
    energy: dict[str, float] = {}
    power: dict[str, float] = {}
    names: dict[str, str] = {}
    for series, labels, value in samples:
        if "GPU_I_ID" in labels:
            continue
        gpu = labels.get("gpu") or labels.get("UUID") or "0"
        names.setdefault(gpu, labels.get("modelName", ""))
        (power if series == DCGM_POWER else energy)[gpu] = value
    if not energy and not power:
        raise EnergyUnavailable(f"{url} has neither {DCGM_ENERGY} nor {DCGM_POWER}")
    gpus = sorted(set(energy) | set(power), key=lambda g: (len(g), g))
    return [GpuReading(g, names.get(g) or None, energy.get(g), power.get(g)) for g in gpus]


class EnergyMeter:
    """Reads `source` at `start()` and `stop()`, sampling power in between for GPUs without a counter.

    Never raises: a source that fails leaves a window with the reason and a warning naming it.
    """

    def __init__(self, source: EnergySource, interval_s: float | None = None) -> None:
        self.source = source
        self.interval_s = source.interval_s if interval_s is None else interval_s
        self._first: dict[str, GpuReading] = {}
        self._t0 = 0.0
        self._power: dict[str, list[tuple[float, float]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._failed: str | None = None

    async def start(self) -> None:
        try:
            await self.source.open()
            readings = await self.source.read(pids=True)
        except (EnergyUnavailable, SamplerUnavailable) as exc:
            self._failed = str(exc)
            return
        self._t0 = time.monotonic()
        self._first = {r.gpu: r for r in readings}
        self._note_power(readings, self._t0)
        if any(r.energy_mj is None for r in readings):
            self._task = asyncio.create_task(self._sample())

    async def stop(self) -> EnergyWindow:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            if self._failed is not None:
                return self._failure(self._failed)
            try:
                readings = await self.source.read(pids=True)
            except (EnergyUnavailable, SamplerUnavailable) as exc:
                return self._failure(str(exc))
            t1 = time.monotonic()
            self._note_power(readings, t1)
            return self._window(readings, t1)
        finally:
            with contextlib.suppress(Exception):
                await self.source.close()

    def _failure(self, reason: str) -> EnergyWindow:
        warning = RunWarning(
            code="energy.unavailable",
            message=f"energy: {reason}; energy per token not measured",
            figures={"source": self.source.label},
        )
        return EnergyWindow(self.source.label, None, reason=reason, warnings=[warning])

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                readings = await self.source.read()
            except (EnergyUnavailable, SamplerUnavailable):
                continue  # a missed sample; the integral bridges it
            self._note_power(readings, time.monotonic())

    def _note_power(self, readings: list[GpuReading], at: float) -> None:
        for r in readings:
            if r.energy_mj is None and r.power_w is not None:
                self._power.setdefault(r.gpu, []).append((at, r.power_w))

    def _window(self, readings: list[GpuReading], t1: float) -> EnergyWindow:
        window_s = t1 - self._t0
        out = EnergyWindow(self.source.label, window_s)
        for r in readings:
            first = self._first.get(r.gpu)
            gpu = _gpu_window(r, first, self._power.get(r.gpu, []), window_s)
            if r.pids is not None:
                gpu.pids = sorted({*r.pids, *(first.pids or () if first else ())})
            if gpu.reason is not None:
                message = f"energy: GPU {r.gpu} ({self.source.label}): {gpu.reason}"
                cause = "counter_backwards" if gpu.method == "counter" else "too_few_power_samples"
                figures: dict[str, float | int | str | None] = {
                    "gpu": r.gpu,
                    "source": self.source.label,
                    "cause": cause,
                }
                out.warnings.append(RunWarning(code="energy.gpu_missing", message=message, figures=figures))
            out.gpus.append(gpu)
        return out


def _gpu_window(
    last: GpuReading, first: GpuReading | None, power: list[tuple[float, float]], window_s: float
) -> GpuWindow:
    if first is not None and first.energy_mj is not None and last.energy_mj is not None:
        joules = (last.energy_mj - first.energy_mj) / 1000.0
        if joules < 0:
            reason = (
                f"its energy counter went backwards ({first.energy_mj:.0f} -> {last.energy_mj:.0f} mJ): "
                "the driver or the exporter restarted during the run"
            )
            return GpuWindow(last.gpu, last.name, None, None, "counter", reason=reason)
        return GpuWindow(last.gpu, last.name, joules, joules / window_s if window_s > 0 else None, "counter")
    if len(power) < 2:
        reason = "no energy counter, and too few power samples to integrate"
        return GpuWindow(last.gpu, last.name, None, None, "power_samples", len(power), reason)
    joules = sum((t1 - t0) * (p0 + p1) / 2.0 for (t0, p0), (t1, p1) in zip(power, power[1:], strict=False))
    span = power[-1][0] - power[0][0]
    return GpuWindow(last.gpu, last.name, joules, joules / span if span > 0 else None, "power_samples", len(power))


def sharing_warnings(window: EnergyWindow, server_pids: set[int] | None) -> list[RunWarning]:
    """What a sceptic asks of a GPU's energy: whose was it? `server_pids` are the server's process and
    its children (None: not found, as for a server in another container). A GPU whose processes NVML
    does not list says nothing."""
    measured = [g for g in window.gpus if g.joules is not None and g.pids is not None]
    if not measured:
        return []
    if server_pids:
        serving = [g for g in measured if server_pids & set(g.pids or ())]
        if not serving:
            others = sorted({pid for g in measured for pid in g.pids or ()})
            joules = sum(g.joules or 0.0 for g in measured)
            message = (
                f"energy: the server's processes ({_pid_list(server_pids)}) ran on none of the GPUs measured; "
                f"their {joules:.0f} J belong to "
                + (f"other processes ({_pid_list(others)})" if others else "idle boards")
                + ", not to this run"
            )
            figures: dict[str, float | int | str | None] = {"joules": round(joules, 3), "other_pids": _pid_list(others)}
            return [RunWarning(code="energy.server_not_on_gpu", message=message, figures=figures)]
        measured = serving
    out = []
    for g in measured:
        others = sorted(set(g.pids or ()) - (server_pids or set()))
        if (server_pids and others) or (not server_pids and len(others) > 1):
            message = (
                f"energy: GPU {g.gpu} also ran processes other than the server's ({_pid_list(others)}): "
                "their draw is in this run's energy"
                if server_pids
                else f"energy: GPU {g.gpu} ran {len(others)} processes ({_pid_list(others)}): the energy is "
                "all of theirs, not only the server's"
            )
            figures = {"gpu": g.gpu, "pids": _pid_list(others), "joules": g.joules}
            out.append(RunWarning(code="energy.shared_gpu", message=message, figures=figures))
    return out


def _pid_list(pids: set[int] | list[int]) -> str:
    return ", ".join(str(p) for p in sorted(pids))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
