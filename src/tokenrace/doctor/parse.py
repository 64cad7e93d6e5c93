"""Parsers for the text the NVIDIA/Linux tools print. Pure functions, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass

NVIDIA_VENDOR_ID = "0x10de"
_GPU_CLASSES = ("VGA compatible controller", "3D controller", "Display controller")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int | None
    driver: str | None
    bus_id: str | None


@dataclass(frozen=True)
class DkmsEntry:
    module: str
    version: str
    kernel: str | None
    arch: str | None
    state: str


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """'12.4' -> (12, 4); '2.4.0+cu124' -> (2, 4, 0); None or junk -> None."""
    if not text:
        return None
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def lspci_gpus(text: str) -> list[str]:
    """The NVIDIA display/3D controllers in `lspci` output (HDMI audio and USB parts left out)."""
    return [
        line.strip()
        for line in text.splitlines()
        if "NVIDIA" in line and any(f" {cls}" in line for cls in _GPU_CLASSES)
    ]


def sysfs_is_nvidia_gpu(vendor: str | None, pci_class: str | None) -> bool:
    """A PCI function from /sys/bus/pci/devices: NVIDIA vendor id and display class 0x03xxxx."""
    return (vendor or "").strip().lower() == NVIDIA_VENDOR_ID and (pci_class or "").strip().startswith("0x03")


def loaded_modules(text: str) -> dict[str, str]:
    """Module name -> its 'used by' column, from `lsmod` or /proc/modules."""
    modules: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[0] == "Module" or not parts[1].isdigit():
            continue
        modules[parts[0]] = parts[3] if len(parts) > 3 else ""
    return modules


def blacklists_nouveau(config: str) -> bool:
    """Whether a modprobe.d file keeps nouveau from loading."""
    pattern = r"^\s*(blacklist\s+nouveau\b|install\s+nouveau\s+/bin/(false|true))"
    return re.search(pattern, config, re.MULTILINE) is not None


def cmdline_disables_nouveau(cmdline: str) -> bool:
    return (
        re.search(r"(modprobe\.blacklist=\S*nouveau|rd\.driver\.blacklist=\S*nouveau|nouveau\.modeset=0)", cmdline)
        is not None
    )


def smi_header(text: str) -> tuple[str | None, str | None]:
    """(driver version, highest CUDA version the driver supports) from the nvidia-smi table."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return (driver.group(1) if driver else None, cuda.group(1) if cuda else None)


def smi_table_gpus(text: str) -> list[str]:
    """GPU names from the rows of the nvidia-smi table (the names may be cut short there)."""
    row = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", re.MULTILINE)
    return [match.group(2).strip() for match in row.finditer(text)]


def smi_query(text: str) -> list[Gpu]:
    """Rows of `nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id`."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 5 or not fields[0].isdigit():
            continue
        memory = fields[2] if fields[2].isdigit() else None
        gpus.append(
            Gpu(int(fields[0]), fields[1], int(memory) if memory else None, fields[3] or None, fields[4] or None)
        )
    return gpus


def nvcc_release(text: str) -> str | None:
    """'Cuda compilation tools, release 12.4, V12.4.131' -> '12.4'."""
    match = re.search(r"release\s+(\d+\.\d+)", text)
    return match.group(1) if match else None


def dkms_entries(text: str) -> list[DkmsEntry]:
    """Lines of `dkms status`, old ('nvidia, 550.54.15, ...') and new ('nvidia/550.54.15, ...') style."""
    entries: list[DkmsEntry] = []
    for line in text.splitlines():
        head, sep, state = line.partition(":")
        if not sep:
            continue
        parts = [part.strip() for part in head.split(",")]
        if "/" in parts[0]:
            module, version = parts[0].split("/", 1)
            rest = parts[1:]
        elif len(parts) >= 2:
            module, version, rest = parts[0], parts[1], parts[2:]
        else:
            continue
        kernel = rest[0] if rest else None
        arch = rest[1] if len(rest) > 1 else None
        entries.append(DkmsEntry(module, version, kernel, arch, state.strip().split(" ")[0].rstrip(",")))
    return entries


def kernel_module_version(proc_version: str) -> str | None:
    """/proc/driver/nvidia/version -> the loaded kernel module's version."""
    match = re.search(r"Kernel Module(?:\s+for\s+\w+)?\s+([\d.]+)", proc_version)
    return match.group(1) if match else None


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo in bytes."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if match:
            values[match.group(1)] = int(match.group(2)) * 1024
    return values


def cpu_model(cpuinfo: str) -> str | None:
    for key in ("model name", "Model", "Hardware", "cpu model"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return None


def os_release(text: str) -> str | None:
    match = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', text, re.MULTILINE)
    return match.group(1) if match else None
