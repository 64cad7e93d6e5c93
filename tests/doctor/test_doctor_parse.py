from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tokenrace.doctor import parse

from .scenarios import FIXTURES


def read(scenario: str, name: str) -> str:
    return (FIXTURES / scenario / name).read_text()


def test_lspci_keeps_gpus_and_drops_hdmi_audio() -> None:
    gpus = parse.lspci_gpus(read("nouveau-loaded", "lspci.txt"))
    assert gpus == ["01:00.0 VGA compatible controller: NVIDIA Corporation AD102 [GeForce RTX 4090] (rev a1)"]
    assert parse.lspci_gpus(read("healthy-h100", "lspci.txt")) == [
        "18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)"
    ]
    assert parse.lspci_gpus(read("no-gpu", "lspci.txt")) == []


def test_sysfs_ids() -> None:
    assert parse.sysfs_is_nvidia_gpu("0x10de\n", "0x030200\n")
    assert not parse.sysfs_is_nvidia_gpu("0x10de", "0x040300")  # HDMI audio function
    assert not parse.sysfs_is_nvidia_gpu("0x1af4", "0x030000")
    assert not parse.sysfs_is_nvidia_gpu(None, None)


def test_modules_from_lsmod_and_proc_modules() -> None:
    lsmod = parse.loaded_modules(read("healthy-h100", "lsmod.txt"))
    assert lsmod["nvidia"] == "nvidia_uvm,nvidia_modeset"
    assert "Module" not in lsmod
    proc = parse.loaded_modules(read("container-without-gpus", "files/proc/modules"))
    assert {"nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"} <= set(proc)
    assert "nouveau" in parse.loaded_modules(read("nouveau-loaded", "lsmod.txt"))


def test_nouveau_blacklist_forms() -> None:
    assert parse.blacklists_nouveau("blacklist nouveau\noptions nouveau modeset=0\n")
    assert parse.blacklists_nouveau("# comment\n  blacklist nouveau\n")
    assert parse.blacklists_nouveau("install nouveau /bin/false\n")
    assert not parse.blacklists_nouveau("# blacklist nouveau\noptions snd-pcsp index=-2\n")
    assert parse.cmdline_disables_nouveau("BOOT_IMAGE=/vmlinuz ro quiet splash nouveau.modeset=0")
    assert parse.cmdline_disables_nouveau("ro modprobe.blacklist=nouveau")
    assert not parse.cmdline_disables_nouveau("ro quiet splash")


def test_smi_header_and_rows_new_and_old_layout() -> None:
    new = read("healthy-h100", "nvidia-smi.txt")
    assert parse.smi_header(new) == ("550.54.15", "12.4")
    assert parse.smi_table_gpus(new) == ["NVIDIA H100 80GB HBM3"]
    old = read("torch-cuda-mismatch", "nvidia-smi.txt")
    assert parse.smi_header(old) == ("470.239.06", "11.4")
    assert parse.smi_table_gpus(old) == ["Tesla V100-SXM2..."]
    assert parse.smi_header(read("driver-not-loaded", "nvidia-smi.txt")) == (None, None)


def test_smi_query() -> None:
    [gpu] = parse.smi_query(read("healthy-h100", "nvidia-smi-query.txt"))
    assert gpu == parse.Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "550.54.15", "00000000:18:00.0")
    assert parse.smi_query("0, NVIDIA A10G, [N/A], 535.1, 00000000:00:1E.0") == [
        parse.Gpu(0, "NVIDIA A10G", None, "535.1", "00000000:00:1E.0")
    ]


def test_nvcc_release() -> None:
    assert parse.nvcc_release(read("healthy-h100", "nvcc.txt")) == "12.4"
    assert parse.nvcc_release(read("nvcc-newer-than-driver", "nvcc.txt")) == "12.6"
    assert parse.nvcc_release("bash: nvcc: command not found") is None


def test_dkms_new_and_old_formats() -> None:
    [new] = parse.dkms_entries("nvidia/550.54.15, 6.5.0-27-generic, x86_64: installed")
    assert new == parse.DkmsEntry("nvidia", "550.54.15", "6.5.0-27-generic", "x86_64", "installed")
    [old] = parse.dkms_entries("nvidia, 470.239.06, 5.15.0-1062-aws, x86_64: installed")
    assert (old.module, old.version, old.kernel, old.state) == ("nvidia", "470.239.06", "5.15.0-1062-aws", "installed")
    [added] = parse.dkms_entries("nvidia/550.54.15: added")
    assert (added.kernel, added.state) == (None, "added")
    warned = parse.dkms_entries(
        "nvidia/550.54.15, 6.5.0-27-generic, x86_64: installed (WARNING! Diff between built and installed module!)"
    )
    assert warned[0].state == "installed"
    assert parse.dkms_entries("Error! Could not locate dkms.conf file.") == []


def test_kernel_module_version_and_versions() -> None:
    assert parse.kernel_module_version(read("healthy-h100", "files/proc/driver/nvidia/version")) == "550.54.15"
    assert (
        parse.kernel_module_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16-I3-B03-4-3)"
        )
        == "550.54.15"
    )
    assert parse.version_tuple("2.5.1+cu124") == (2, 5, 1)
    assert parse.version_tuple("v0.6.4.post1") == (0, 6, 4)
    assert parse.version_tuple(None) is None
    assert parse.version_tuple("unknown") is None


def test_host_files() -> None:
    assert parse.cpu_model(read("healthy-h100", "files/proc/cpuinfo")) == "Intel(R) Xeon(R) Platinum 8480+"
    assert parse.os_release(read("no-gpu", "files/etc/os-release")) == "Debian GNU/Linux 12 (bookworm)"
    assert parse.meminfo("MemTotal:       24683656 kB\nMemAvailable:   23936844 kB\n") == {
        "MemTotal": 24683656 * 1024,
        "MemAvailable": 23936844 * 1024,
    }


@given(st.text(max_size=400))
def test_parsers_never_raise(text: str) -> None:
    parse.lspci_gpus(text)
    parse.loaded_modules(text)
    parse.smi_header(text)
    parse.smi_table_gpus(text)
    parse.smi_query(text)
    parse.nvcc_release(text)
    parse.dkms_entries(text)
    parse.kernel_module_version(text)
    parse.version_tuple(text)
    parse.cpu_model(text)
    parse.os_release(text)
