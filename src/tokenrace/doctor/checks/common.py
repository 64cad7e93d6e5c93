"""Helpers several checks share. Each one reads through the context, so it leaves evidence."""

from __future__ import annotations

import re

from tokenrace.doctor import parse
from tokenrace.doctor.registry import Context

MODPROBE_DIRS = ("/etc/modprobe.d", "/lib/modprobe.d", "/usr/lib/modprobe.d", "/run/modprobe.d")
CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")
KERNEL_LOG_PATTERN = r"nvrm|nvidia|nouveau|lockdown|signature|key was rejected|required key"


def loaded_modules(ctx: Context) -> dict[str, str] | None:
    """Loaded kernel modules from `lsmod`, else /proc/modules; None when neither can be read."""
    res = ctx.run("lsmod", grep=r"^(nvidia|nouveau)")
    if res.ok:
        return parse.loaded_modules(res.stdout)
    text = ctx.read("/proc/modules", grep=r"^(nvidia|nouveau)")
    return None if text is None else parse.loaded_modules(text)


def running_kernel(ctx: Context) -> str | None:
    res = ctx.run("uname")
    if res.ok and res.stdout.strip():
        return res.stdout.strip()
    text = ctx.read("/proc/sys/kernel/osrelease")
    return text.strip() if text else None


def kernel_log(ctx: Context) -> str:
    """NVIDIA-related kernel log lines ('' when dmesg is missing or not allowed)."""
    res = ctx.run("dmesg", grep=KERNEL_LOG_PATTERN)
    if not res.ok:
        return ""
    return "\n".join(line for line in res.stdout.splitlines() if re.search(KERNEL_LOG_PATTERN, line, re.IGNORECASE))


def nouveau_blacklist_files(ctx: Context) -> list[str]:
    """modprobe.d files and the kernel command line entries that keep nouveau out."""
    probe = ctx.probe
    found = [
        f"{folder}/{name}"
        for folder in MODPROBE_DIRS
        for name in probe.listdir(folder)
        if name.endswith(".conf") and parse.blacklists_nouveau(probe.read_file(f"{folder}/{name}") or "")
    ]
    if parse.cmdline_disables_nouveau(probe.read_file("/proc/cmdline") or ""):
        found.append("/proc/cmdline")
    ctx.note(
        "grep -l 'blacklist nouveau' /etc/modprobe.d/*.conf /lib/modprobe.d/*.conf; cat /proc/cmdline",
        "\n".join(found) or "(none)",
    )
    return found


def in_container(ctx: Context) -> bool:
    if ctx.in_container is None:
        probe = ctx.probe
        cgroup = probe.read_file("/proc/1/cgroup") or ""
        ctx.in_container = (
            any(probe.exists(marker) for marker in CONTAINER_MARKERS)
            or bool(probe.env("container"))
            or re.search(r"docker|kubepods|containerd|libpod|lxc", cgroup) is not None
        )
    return ctx.in_container


def device_nodes(ctx: Context) -> list[str]:
    nodes = [f"/dev/{name}" for name in ctx.probe.listdir("/dev") if name.startswith("nvidia")]
    ctx.note("ls /dev/nvidia*", "\n".join(nodes) or "(none)")
    return nodes


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB"


def major_minor(version: str | None) -> tuple[int, int] | None:
    parts = parse.version_tuple(version)
    if not parts:
        return None
    return (parts[0], parts[1] if len(parts) > 1 else 0)
