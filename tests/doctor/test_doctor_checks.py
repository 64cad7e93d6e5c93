"""Every check on the recorded healthy and broken machines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tokenrace.doctor.checks.cuda import wheel_tag
from tokenrace.doctor.probe import RecordedProbe
from tokenrace.doctor.registry import registered
from tokenrace.doctor.result import Status
from tokenrace.doctor.runner import NO_GPU_HEADLINE, run_doctor

from .scenarios import FIXTURES, SCENARIOS, scenario_report

OK, WARN, FAIL, SKIP = Status.OK, Status.WARN, Status.FAIL, Status.SKIP
CHECKS = [
    "pci",
    "nouveau",
    "dkms",
    "secure-boot",
    "nvidia-module",
    "container",
    "nvidia-smi",
    "cuda-toolkit",
    "torch",
    "engines",
]

# scenario -> the status of each check, in CHECKS order
EXPECTED: dict[str, list[Status]] = {
    "healthy-h100": [OK, OK, OK, OK, OK, OK, OK, OK, OK, OK],
    # recorded by `doctor --record` on a lent H100 VM (Firecracker): no dkms, mokutil or engine installed
    "recorded-h100-vm": [OK, OK, SKIP, SKIP, OK, OK, OK, OK, OK, SKIP],
    "no-gpu": [WARN, SKIP, SKIP, SKIP, SKIP, SKIP, SKIP, SKIP, SKIP, SKIP],
    "nouveau-loaded": [OK, FAIL, OK, OK, FAIL, SKIP, FAIL, SKIP, SKIP, SKIP],
    "driver-not-loaded": [OK, OK, OK, OK, FAIL, SKIP, FAIL, SKIP, SKIP, SKIP],
    "dkms-not-built-for-kernel": [OK, OK, FAIL, OK, FAIL, SKIP, FAIL, SKIP, SKIP, SKIP],
    "secure-boot-blocks-module": [OK, OK, OK, FAIL, FAIL, SKIP, FAIL, SKIP, SKIP, SKIP],
    "nvcc-newer-than-driver": [OK, OK, OK, OK, OK, OK, OK, FAIL, OK, SKIP],
    "torch-cpu-build": [OK, OK, OK, OK, OK, OK, OK, OK, FAIL, SKIP],
    "torch-cuda-mismatch": [OK, OK, OK, OK, OK, SKIP, OK, OK, FAIL, SKIP],
    "container-without-gpus": [OK, OK, SKIP, SKIP, OK, FAIL, FAIL, SKIP, FAIL, OK],
    "nvml-mismatch": [OK, OK, OK, OK, OK, OK, FAIL, SKIP, SKIP, OK],
}

# scenario -> (check, knowledge entry that explains it)
ROOT_CAUSE = {
    "no-gpu": ("pci", "no-nvidia-gpu"),
    "nouveau-loaded": ("nouveau", "nouveau-conflict"),
    "driver-not-loaded": ("nvidia-module", "smi-no-driver"),
    "dkms-not-built-for-kernel": ("dkms", "dkms-kernel-mismatch"),
    "secure-boot-blocks-module": ("secure-boot", "secure-boot-unsigned"),
    "nvcc-newer-than-driver": ("cuda-toolkit", "toolkit-newer-than-driver"),
    "torch-cpu-build": ("torch", "torch-cuda-mismatch"),
    "torch-cuda-mismatch": ("torch", "torch-cuda-mismatch"),
    "container-without-gpus": ("container", "container-no-gpu"),
    "nvml-mismatch": ("nvidia-smi", "nvml-version-mismatch"),
}


def test_every_scenario_has_expectations() -> None:
    assert sorted(EXPECTED) == SCENARIOS
    assert [spec.id for spec in registered() if not spec.needs_model] == CHECKS


@pytest.mark.parametrize("name", SCENARIOS)
def test_statuses(name: str) -> None:
    report = scenario_report(name)
    assert [c.id for c in report.checks] == CHECKS
    assert {c.id: c.status for c in report.checks} == dict(zip(CHECKS, EXPECTED[name], strict=True))


@pytest.mark.parametrize("name", SCENARIOS)
def test_problems_come_with_cause_fix_and_evidence(name: str) -> None:
    for check in scenario_report(name).checks:
        assert "crashed" not in check.summary
        if check.status in (WARN, FAIL):
            assert check.cause and check.fix, check.id
            assert check.evidence, check.id
        for item in check.evidence:
            assert item.cmd and item.excerpt


@pytest.mark.parametrize(("name", "root"), sorted(ROOT_CAUSE.items()))
def test_root_cause_named_from_the_knowledge_base(name: str, root: tuple[str, str]) -> None:
    check_id, kb = root
    report = scenario_report(name)
    assert report.get(check_id).kb == kb
    failed = [c for c in report.checks if c.status is FAIL]
    if failed:
        assert failed[0].id == check_id, "the first failure shown is the root cause"
        assert failed[0].summary in report.headline


@pytest.mark.parametrize(
    ("name", "code"), [("healthy-h100", 0), ("no-gpu", 1), ("driver-not-loaded", 2), ("torch-cpu-build", 2)]
)
def test_exit_codes(name: str, code: int) -> None:
    assert scenario_report(name).exit_code == code


def test_healthy_details() -> None:
    report = scenario_report("healthy-h100")
    smi = report.get("nvidia-smi")
    assert smi.details["driver"] == "550.54.15" and smi.details["cuda"] == "12.4"
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "bus_id": "00000000:18:00.0"}]
    assert [g.model_dump() for g in smi.details["gpus"]] == gpus
    assert report.get("nvidia-module").details["version"] == "550.54.15"
    assert report.get("engines").details["vllm"] == "0.6.4.post1"
    assert report.headline.startswith("The NVIDIA stack looks healthy")


def test_recorded_h100_vm_is_healthy() -> None:
    """A real machine, not a hand-written one: what doctor said there, it says on the replay."""
    report = scenario_report("recorded-h100-vm")
    smi = report.get("nvidia-smi")
    assert smi.details["driver"] == "580.159.04" and smi.details["cuda"] == "13.0"
    assert [g.model_dump() for g in smi.details["gpus"]] == [
        {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "bus_id": "00000000:00:06.0"}
    ]
    assert report.get("pci").details["devices"] == ["0000:00:06.0 NVIDIA display controller [10de]"]
    assert report.get("torch").status is OK
    assert report.exit_code == 0
    assert report.headline == (
        "The NVIDIA stack looks healthy: driver 580.159.04, CUDA 13.0, 1x NVIDIA H100 80GB HBM3."
    )


def test_no_gpu_says_so_plainly() -> None:
    report = scenario_report("no-gpu")
    assert report.headline == NO_GPU_HEADLINE
    assert "No NVIDIA GPU" in report.headline and "tokenrace bench" in report.headline
    assert report.get("nvidia-smi").summary == "skipped: no NVIDIA GPU on the PCI bus"


def test_downstream_failures_point_at_the_root_cause() -> None:
    report = scenario_report("dkms-not-built-for-kernel")
    dkms = report.get("dkms")
    assert "6.8.0-45-generic" in dkms.summary and "sudo dkms install nvidia/535.183.01 -k 6.8.0-45-generic" in (
        dkms.fix or ""
    )
    for check_id in ("nvidia-module", "nvidia-smi"):
        check = report.get(check_id)
        assert check.kb == "dkms-kernel-mismatch"
        assert "dkms" in (check.cause or "") and "Fix dkms first" in (check.fix or "")


def test_driver_not_loaded_suggests_the_missing_reboot() -> None:
    module = scenario_report("driver-not-loaded").get("nvidia-module")
    assert "rebooted" in module.summary
    assert (module.fix or "").startswith("Reboot first")


def test_secure_boot_cites_the_kernel_log() -> None:
    check = scenario_report("secure-boot-blocks-module").get("secure-boot")
    assert "kernel log" in check.summary
    assert any("Lockdown" in e.excerpt for e in check.evidence)
    assert "MOK" in (check.fix or "")


def test_nouveau_fix_is_the_blacklist_procedure() -> None:
    check = scenario_report("nouveau-loaded").get("nouveau")
    fix = check.fix or ""
    assert "/etc/modprobe.d/blacklist-nouveau.conf" in fix and "update-initramfs -u" in fix and "reboot" in fix


def test_nvcc_newer_than_driver_explains_the_two_versions() -> None:
    check = scenario_report("nvcc-newer-than-driver").get("cuda-toolkit")
    assert check.details == {"nvcc": "12.6", "driver_cuda": "12.2"}
    assert "nvidia-smi" in (check.cause or "") and "nvcc" in (check.cause or "")


def test_torch_mismatch_and_cpu_build() -> None:
    mismatch = scenario_report("torch-cuda-mismatch").get("torch")
    assert "12.1" in mismatch.summary and "11.4" in mismatch.summary
    cpu = scenario_report("torch-cpu-build").get("torch")
    assert "CPU-only" in cpu.summary and "download.pytorch.org/whl/cu124" in (cpu.fix or "")


def test_container_without_gpus() -> None:
    report = scenario_report("container-without-gpus")
    assert "--gpus all" in (report.get("container").fix or "")
    for check_id in ("nvidia-smi", "torch"):
        assert report.get(check_id).kb == "container-no-gpu"
        assert "Fix container first" in (report.get(check_id).fix or "")
    assert report.get("nvidia-module").status is OK  # read from /proc/modules (no lsmod in the image)


def test_nvml_mismatch_maps_the_failure_text() -> None:
    check = scenario_report("nvml-mismatch").get("nvidia-smi")
    assert "Driver/library version mismatch" in check.summary
    assert "Reboot" in (check.fix or "")


# ---- variations built from a copy of a scenario -----------------------------------------------


def test_missing_tools_are_skips(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    for name in ("dkms.txt", "mokutil.txt", "nvcc.txt", "torch.txt", "engines.txt"):
        (root / name).unlink()
    report = run_doctor(RecordedProbe(root))
    for check_id in ("dkms", "secure-boot", "cuda-toolkit", "engines"):
        assert report.get(check_id).status is SKIP, check_id
    assert report.get("torch").status is SKIP
    assert report.exit_code == 0


def test_hung_nvidia_smi(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    (root / "nvidia-smi.txt").unlink()
    (root / "nvidia-smi.timeout").write_text("")
    check = run_doctor(RecordedProbe(root)).get("nvidia-smi")
    assert check.status is FAIL and check.kb == "gpu-fallen-off-bus"
    assert "timeout" in check.evidence[0].excerpt


def test_driver_never_installed(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("no-gpu")
    (root / "lspci.txt").write_text(
        (root / "lspci.txt").read_text() + "00:06.0 3D controller: NVIDIA Corporation GA102GL [A10G] (rev a1)\n"
    )
    report = run_doctor(RecordedProbe(root))
    assert report.get("pci").status is OK
    assert report.get("nvidia-smi").kb == "smi-not-found"


def test_cuda_toolkit_off_path(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    (root / "nvcc.txt").unlink()
    (root / "files/usr/local/cuda/bin").mkdir(parents=True)
    (root / "files/usr/local/cuda/bin/nvcc").write_text("")
    check = run_doctor(RecordedProbe(root)).get("cuda-toolkit")
    assert check.status is WARN and check.kb == "nvcc-not-found"
    assert "PATH=/usr/local/cuda/bin" in (check.fix or "")


def test_torch_minor_newer_than_driver_is_a_warning(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("nvcc-newer-than-driver")  # driver CUDA 12.2
    (root / "torch.txt").write_text(
        '{"installed": true, "version": "2.5.1+cu124", "cuda": "12.4", "available": true}\n'
    )
    assert run_doctor(RecordedProbe(root)).get("torch").status is WARN


def test_torch_without_kernels_for_the_gpu(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    (root / "torch.txt").write_text(
        '{"installed": true, "version": "1.13.1+cu117", "cuda": "11.7", "available": true, "device_count": 1,'
        ' "capability": [9, 0], "arch_list": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]}\n'
    )
    check = run_doctor(RecordedProbe(root)).get("torch")
    assert check.status is FAIL and check.kb == "no-kernel-image" and "sm_90" in check.summary


def test_ptx_covers_newer_gpus(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    (root / "torch.txt").write_text(
        '{"installed": true, "version": "2.5.1+cu124", "cuda": "12.4", "available": true, "device_count": 1,'
        ' "capability": [9, 0], "arch_list": ["sm_80", "compute_80"]}\n'
    )
    assert run_doctor(RecordedProbe(root)).get("torch").status is OK


def test_nouveau_still_loaded_after_blacklisting(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("nouveau-loaded")
    (root / "files/etc/modprobe.d/blacklist-nouveau.conf").write_text("blacklist nouveau\n")
    check = run_doctor(RecordedProbe(root)).get("nouveau")
    assert check.status is FAIL and "initramfs was not rebuilt" in (check.fix or "")


def test_secure_boot_on_with_a_signed_module_is_fine(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    (root / "mokutil.txt").write_text("SecureBoot enabled\n")
    assert run_doctor(RecordedProbe(root)).get("secure-boot").status is OK


def test_vllm_without_a_gpu_warns(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("no-gpu")
    (root / "engines.txt").write_text('{"vllm": "0.6.4.post1", "sglang": null, "llama_cpp_python": null}\n')
    (root / "llama-server.stderr").write_text(
        "version: 4240 (a4e6f0b5)\nbuilt with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu\n"
    )
    check = run_doctor(RecordedProbe(root)).get("engines")
    assert check.status is WARN
    assert check.details["llama-server"] == "b4240 (a4e6f0b5)"


def test_host_docker_without_container_toolkit(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    (root / "nvidia-ctk.txt").unlink()
    check = run_doctor(RecordedProbe(root)).get("container")
    assert check.status is WARN and check.kb == "container-no-gpu"


def test_sysfs_fallback_without_lspci(tmp_path: Path) -> None:
    for address, vendor, pci_class in [("0000:00:00.0", "0x8086", "0x060000"), ("0000:01:00.0", "0x10de", "0x030200")]:
        device = tmp_path / "files/sys/bus/pci/devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(pci_class + "\n")
    check = run_doctor(RecordedProbe(tmp_path)).get("pci")
    assert check.status is OK and check.details["nvidia_on_bus"] is True
    assert "0x10de" in check.evidence[-1].excerpt


def test_unknown_bus_does_not_skip_nvidia_smi(tmp_path: Path) -> None:
    (tmp_path / "scenario.json").write_text('{"system": "Windows"}')

    for name in ("nvidia-smi.txt", "nvidia-smi-query.txt"):
        (tmp_path / name).write_text((FIXTURES / "healthy-h100" / name).read_text())
    report = run_doctor(RecordedProbe(tmp_path))
    assert report.get("pci").summary == "only checked on Linux (this is Windows)"
    assert report.get("nvidia-smi").status is OK
    assert report.exit_code == 0


def test_a_crashing_check_does_not_take_doctor_down(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    (root / "torch.txt").write_text(
        '{"installed": true, "version": "2.5.1+cu124", "cuda": "12.4", "available": true, "capability": ["x"], "arch_list": ["sm_90"]}\n'
    )
    check = run_doctor(RecordedProbe(root)).get("torch")
    assert check.status is WARN and "crashed" in check.summary


def test_secure_boot_on_machines_without_efi(copy_scenario: Callable[[str], Path]) -> None:
    root = copy_scenario("healthy-h100")
    (root / "mokutil.txt").write_text("This system doesn't support Secure Boot\n")
    assert run_doctor(RecordedProbe(root)).get("secure-boot").summary.startswith("legacy BIOS boot")


def test_wheel_tag_for_the_driver() -> None:
    assert [wheel_tag(v) for v in ("12.4", "12.2", "12.5", "11.4", "13.0", None)] == [
        "cu124",
        "cu121",
        "cu124",
        None,
        "cu130",
        None,
    ]
