"""Is there an NVIDIA GPU, and is nouveau out of its way?"""

from __future__ import annotations

from tokenrace.doctor import parse
from tokenrace.doctor.checks.common import loaded_modules, nouveau_blacklist_files
from tokenrace.doctor.registry import Context, Finding, check, from_kb, ok, skip
from tokenrace.doctor.result import Status

PCI_DEVICES = "/sys/bus/pci/devices"


@check("pci", "NVIDIA device on the PCI bus", linux_only=True)
def pci(ctx: Context) -> Finding:
    res = ctx.run("lspci", grep="nvidia")
    gpus = parse.lspci_gpus(res.stdout) if res.ok else sysfs_gpus(ctx)
    if gpus is None:
        return skip("cannot list PCI devices: lspci is missing and /sys/bus/pci is not readable", nvidia_on_bus=None)
    if not gpus:
        return from_kb(Status.WARN, "No NVIDIA GPU on the PCI bus", "no-nvidia-gpu", nvidia_on_bus=False, devices=[])
    return ok(f"{len(gpus)} NVIDIA GPU(s): {_short(gpus[0])}", nvidia_on_bus=True, devices=gpus)


def sysfs_gpus(ctx: Context) -> list[str] | None:
    """NVIDIA display functions from /sys/bus/pci/devices (for machines without pciutils)."""
    probe = ctx.probe
    addresses = probe.listdir(PCI_DEVICES)
    if not addresses:
        return None
    ids = {
        a: (probe.read_file(f"{PCI_DEVICES}/{a}/vendor"), probe.read_file(f"{PCI_DEVICES}/{a}/class"))
        for a in addresses
    }
    listing = "\n".join(f"{a} vendor={(v or '?').strip()} class={(c or '?').strip()}" for a, (v, c) in ids.items())
    ctx.note(f"cat {PCI_DEVICES}/*/vendor {PCI_DEVICES}/*/class", listing)
    return [f"{a} NVIDIA display controller [10de]" for a, (v, c) in ids.items() if parse.sysfs_is_nvidia_gpu(v, c)]


def _short(lspci_line: str) -> str:
    return lspci_line.split(": ", 1)[-1]


@check("nouveau", "nouveau not in the way", needs_gpu=True, linux_only=True)
def nouveau(ctx: Context) -> Finding:
    modules = loaded_modules(ctx)
    if modules is None:
        return skip("cannot list loaded kernel modules (no lsmod, no /proc/modules)")
    blacklisted = nouveau_blacklist_files(ctx)
    if "nouveau" in modules:
        pending = (
            " A blacklist exists, so the initramfs was not rebuilt or the machine not rebooted since."
            if blacklisted
            else ""
        )
        return from_kb(
            Status.FAIL,
            "nouveau is loaded and holds the GPU",
            "nouveau-conflict",
            extra_fix=pending.strip(),
            blacklist=blacklisted,
        )
    if blacklisted:
        return ok(f"nouveau is not loaded and is blacklisted ({blacklisted[0]})", blacklist=blacklisted)
    return ok("nouveau is not loaded (no blacklist entry found)", blacklist=[])
