"""GPU figures through NVML (nvidia-ml-py's `pynvml`), behind a small interface.

`GpuSampler(nvml)` takes the NVML module as an object, so tests hand it a fake module with the same
functions. Without a driver or a GPU, `open()` raises `SamplerUnavailable` once with a plain reason
and the monitor disables the sampler; it is never retried.

A field a device does not support (power on some boards, utilisation under MIG) is None in every
sample, and its NVML call is not repeated; any other NVML error fails the sample.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from tokenrace.model.monitor import GpuSample

MIB = 2**20

# NVML clock-event ("throttle") reasons worth telling a user about, by bit. Idle, application-clock
# and display settings are left out: they are not the GPU slowing itself down under load.
THROTTLE_REASONS: dict[int, str] = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
THERMAL_REASONS = frozenset({"sw_thermal", "hw_thermal"})

NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND: an older driver lacks the call


class SamplerUnavailable(Exception):
    """The sampler cannot work on this machine (reported once; the sampler is then disabled)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuSampler:
    """One sample: a `GpuSample` per device (see `sample`)."""

    name = "gpu"

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml
        self._handles: list[Any] = []
        self._names: list[str] = []
        self._unsupported: set[tuple[int, str]] = set()  # (device index, field) NVML said no to
        self._opened = False

    def open(self) -> None:
        """Initialise NVML and find the devices; raises SamplerUnavailable with the reason."""
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml  # noqa: PLC0415 - optional at run time: NVML may be missing, and the sampler then says so
            except ImportError as exc:
                raise SamplerUnavailable(f"NVML unavailable: nvidia-ml-py is not installed ({exc})") from None
            nvml = self._nvml = pynvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - any init failure means: no GPU figures here
            raise SamplerUnavailable(f"no NVIDIA GPU / NVML unavailable ({_reason(exc)})") from None
        self._opened = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._names = [_text(nvml.nvmlDeviceGetName(h)) for h in self._handles]
        except Exception as exc:  # noqa: BLE001
            self.close()
            raise SamplerUnavailable(f"NVML could not list the GPUs ({_reason(exc)})") from None
        if not self._handles:
            self.close()
            raise SamplerUnavailable("no NVIDIA GPU (NVML found 0 devices)")

    def sample(self) -> list[GpuSample]:
        return [self._device(i, h) for i, h in enumerate(self._handles)]

    def close(self) -> None:
        if self._opened and self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        self._opened = False

    def _device(self, index: int, handle: Any) -> GpuSample:
        nvml = self._nvml
        assert nvml is not None, "open() first"
        util = self._read(index, "util", nvml.nvmlDeviceGetUtilizationRates, handle)
        mem = self._read(index, "mem", nvml.nvmlDeviceGetMemoryInfo, handle)
        temp = self._read(
            index, "temp", nvml.nvmlDeviceGetTemperature, handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        )
        power_mw = self._read(index, "power", nvml.nvmlDeviceGetPowerUsage, handle)
        limit_mw = self._read(index, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        clock = self._read(index, "sm_clock", nvml.nvmlDeviceGetClockInfo, handle, getattr(nvml, "NVML_CLOCK_SM", 1))
        return GpuSample(
            index=index,
            name=self._names[index],
            util_pct=None if util is None else float(util.gpu),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            temp_c=None if temp is None else float(temp),
            power_w=None if power_mw is None else round(power_mw / 1000.0, 3),  # NVML reports mW
            power_limit_w=None if limit_mw is None else round(limit_mw / 1000.0, 3),
            sm_clock_mhz=None if clock is None else float(clock),
            throttle=self._throttle(index, handle),
        )

    def _throttle(self, index: int, handle: Any) -> list[str] | None:
        """Names of the active slow-down reasons; [] when none, None when NVML cannot tell."""
        nvml = self._nvml
        fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if fn is None:
            return None
        mask = self._read(index, "throttle", fn, handle)
        if mask is None:
            return None
        return [name for bit, name in THROTTLE_REASONS.items() if int(mask) & bit]

    def _read(self, index: int, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        if (index, field) in self._unsupported:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            if getattr(exc, "value", None) in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                self._unsupported.add((index, field))
                return None
            raise


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
