"""The kernel side of the NVIDIA driver: DKMS, Secure Boot, the loaded module."""

from __future__ import annotations

import re

from tokenrace.doctor import knowledge, parse
from tokenrace.doctor.checks.common import kernel_log, loaded_modules, running_kernel
from tokenrace.doctor.registry import Context, Finding, check, from_kb, ok, skip
from tokenrace.doctor.result import CheckResult, Status

# Checks that name a root cause for "the module is not loaded", in the order they are trusted.
ROOT_CAUSES = ("nouveau", "secure-boot", "dkms")


@check("dkms", "DKMS built the module for the running kernel", needs_gpu=True, linux_only=True)
def dkms(ctx: Context) -> Finding:
    res = ctx.run("dkms")
    if res.missing:
        return skip("dkms is not installed (driver from prebuilt kernel packages or the .run installer)")
    if not res.ok:
        return skip(f"dkms status failed (exit {res.returncode})")
    kernel = running_kernel(ctx)
    entries = [e for e in parse.dkms_entries(res.stdout) if e.module.startswith("nvidia")]
    if not entries or kernel is None:
        return skip("no nvidia module is managed by DKMS" if not entries else "cannot tell the running kernel")
    version = entries[-1].version
    here = [e for e in entries if e.kernel == kernel]
    if any(e.state == "installed" for e in here):
        return ok(f"nvidia {version} is built and installed for {kernel}", kernel=kernel, version=version)
    built_for = ", ".join(sorted({e.kernel or e.state for e in entries}))
    summary = f"nvidia {version} is not installed for the running kernel {kernel} (DKMS has: {built_for})"
    here_fix = (
        f"Here: sudo apt install linux-headers-{kernel} && sudo dkms install nvidia/{version} -k {kernel}, then reboot."
    )
    return from_kb(Status.FAIL, summary, "dkms-kernel-mismatch", extra_fix=here_fix, kernel=kernel, version=version)


@check("secure-boot", "Secure Boot lets the module load", needs_gpu=True, linux_only=True)
def secure_boot(ctx: Context) -> Finding:
    res = ctx.run("mokutil")
    text = res.output
    if res.missing:
        return skip("mokutil is not installed; Secure Boot state unknown")
    if re.search(r"not supported|doesn't support", text):
        return ok("legacy BIOS boot: Secure Boot does not apply", secure_boot=False)
    if "SecureBoot disabled" in text:
        return ok("Secure Boot is disabled", secure_boot=False)
    if "SecureBoot enabled" not in text:
        return skip(f"unrecognised mokutil output: {text.strip()[:80]!r}")
    modules = loaded_modules(ctx) or {}
    if "nvidia" in modules:
        return ok("Secure Boot is on and the nvidia module is loaded (it is signed)", secure_boot=True)
    rejected = re.search(r"lockdown|unsigned|signature|key was rejected|required key", kernel_log(ctx), re.IGNORECASE)
    if rejected or ctx.status("dkms") is Status.OK:
        why = (
            "the kernel log shows it refused the module"
            if rejected
            else "the module is built for this kernel yet not loaded"
        )
        return from_kb(Status.FAIL, f"Secure Boot is on and {why}", "secure-boot-unsigned", secure_boot=True)
    return from_kb(
        Status.WARN, "Secure Boot is on and the nvidia module is not loaded", "secure-boot-unsigned", secure_boot=True
    )


@check("nvidia-module", "nvidia kernel module loaded", needs_gpu=True, linux_only=True)
def nvidia_module(ctx: Context) -> Finding:
    modules = loaded_modules(ctx)
    if modules is None:
        return skip("cannot list loaded kernel modules (no lsmod, no /proc/modules)")
    if "nvidia" in modules:
        version = parse.kernel_module_version(ctx.read("/proc/driver/nvidia/version") or "")
        loaded = sorted(m for m in modules if m.startswith("nvidia"))
        return ok(
            f"loaded: {', '.join(loaded)}" + (f" (version {version})" if version else ""),
            version=version,
            modules=loaded,
        )
    summary = "the nvidia kernel module is not loaded"
    upstream = root_cause(ctx)
    if upstream:
        return follows_from(upstream, summary)
    item = knowledge.best(kernel_log(ctx))
    if item:
        return from_kb(Status.FAIL, f"{summary} (see the kernel log)", item.id)
    if ctx.status("dkms") is Status.OK:
        summary += ", although DKMS built it for this kernel: was the machine rebooted after the install?"
    return from_kb(Status.FAIL, summary, "smi-no-driver")


def root_cause(ctx: Context) -> CheckResult | None:
    """The first earlier check that failed for a known reason."""
    for check_id in ROOT_CAUSES:
        result = ctx.results.get(check_id)
        if result is not None and result.status is Status.FAIL and result.kb:
            return result
    return None


def follows_from(upstream: CheckResult, summary: str) -> Finding:
    """A failure explained by an earlier one: point there instead of repeating its cause and fix."""
    end = "" if upstream.summary.endswith((".", "?", "!")) else "."
    cause = f"Follows from the failing {upstream.id} check: {upstream.summary}{end}"
    fix = f"Fix {upstream.id} first (see above), then run tokenrace doctor again."
    return Finding(Status.FAIL, f"{summary} (because of {upstream.id})", cause, fix, kb=upstream.kb)
