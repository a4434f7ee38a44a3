"""Unit tests for the NVIDIA driver probe helpers (plugins/module_utils/gpuhost_nvidia_driver.py).

The /proc and sysfs strings are copied from real hosts: the 2x H200 capture in
tests/fixtures/gpu-hosts/h200x2-nvlink-firecracker and a proprietary-driver host.
"""

from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_nvidia_driver as nd

H200_PROC = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n"
)
PROPRIETARY_PROC = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)


def write(root: Path, path: str, content: str | bytes) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)


def test_proc_version_open_and_proprietary():
    assert nd.parse_proc_version(H200_PROC) == {"version": "580.159.04", "flavour": "open"}
    assert nd.parse_proc_version(PROPRIETARY_PROC) == {
        "version": "535.104.05",
        "flavour": "proprietary",
    }
    assert nd.parse_proc_version(None) == {"version": "", "flavour": "unknown"}
    assert nd.parse_proc_version("garbage") == {"version": "", "flavour": "unknown"}


@pytest.mark.parametrize(
    ("text", "flavour"),
    [("Dual MIT/GPL\n", "open"), ("NVIDIA\n", "proprietary"), ("", "unknown"), (None, "unknown")],
)
def test_flavour_from_license(text, flavour):
    assert nd.flavour_from_license(text) == flavour


@pytest.mark.parametrize(
    ("package_version", "upstream", "branch"),
    [
        ("580.95.05-1", "580.95.05", 580),
        ("580.95.05-0ubuntu1", "580.95.05", 580),
        ("1:570.172.08-1", "570.172.08", 570),
        ("12.8.1-1", "12.8.1", None),
    ],
)
def test_versions(package_version, upstream, branch):
    assert nd.upstream_version(package_version) == upstream
    assert nd.branch_of(package_version) == branch


def test_version_wanted_branch_and_exact():
    assert nd.version_wanted("580.159.04", 580)
    assert not nd.version_wanted("570.172.08", 580)
    assert nd.version_wanted("580.95.05", 580, "580.95.05")
    assert not nd.version_wanted("580.105.08", 580, "580.95.05")
    assert not nd.version_wanted("", 580)


@pytest.mark.parametrize(
    ("name", "version", "member"),
    [
        ("nvidia-open", "580.95.05-1", True),
        ("nvidia-open-580", "580.95.05-0ubuntu1", True),
        ("libnvidia-compute-580", "580.95.05-0ubuntu1", True),
        ("nvidia-persistenced", "580.95.05-1", True),
        ("libcuda1", "580.95.05-1", True),
        ("nvidia-container-toolkit", "1.17.8-1", False),
        ("nvidia-driver-pinning-580", "580-1", False),
        # Ubuntu's X tool library, seen beside the 580.159.04 driver on the H200 host
        ("libxnvctrl0", "510.47.03-0ubuntu4.24.04.1", False),
        ("nvidia-settings", "510.47.03-0ubuntu4", False),
        ("cuda-toolkit-12-8", "12.8.1-1", False),
        ("curl", "7.88.1-10", False),
    ],
)
def test_driver_family(name, version, member):
    assert nd.is_driver_family(name, version) is member


def test_parse_dpkg_query_keeps_installed_and_reads_holds():
    out = (
        "nvidia-open\t580.95.05-1\thold ok installed\n"
        "nvidia-persistenced\t580.95.05-1\tinstall ok installed\n"
        "nvidia-kernel-open-dkms\t570.172.08-1\tdeinstall ok config-files\n"
        "broken line\n"
    )
    assert nd.parse_dpkg_query(out) == [
        {"name": "nvidia-open", "version": "580.95.05-1", "held": True, "state": "installed"},
        {
            "name": "nvidia-persistenced",
            "version": "580.95.05-1",
            "held": False,
            "state": "installed",
        },
    ]


def test_h200_host_tree(tmp_path):
    # Shape of the 2x H200 VM: two 3D controllers bound to the open 580 driver, no NVSwitch.
    write(tmp_path, "/proc/driver/nvidia/version", H200_PROC)
    write(tmp_path, "/sys/module/nvidia/version", "580.159.04\n")
    for bus in ("0000:00:06.0", "0000:00:07.0"):
        write(tmp_path, f"/sys/bus/pci/devices/{bus}/vendor", "0x10de\n")
        write(tmp_path, f"/sys/bus/pci/devices/{bus}/class", "0x030200\n")
        write(tmp_path, f"/sys/bus/pci/devices/{bus}/device", "0x2335\n")
    write(tmp_path, "/sys/bus/pci/devices/0000:00:01.0/vendor", "0x8086\n")
    write(tmp_path, "/sys/bus/pci/devices/0000:00:01.0/class", "0x060000\n")
    root = str(tmp_path)
    assert nd.loaded_driver(root) == {
        "loaded": True,
        "version": "580.159.04",
        "branch": 580,
        "flavour": "open",
    }
    functions = nd.pci_functions(root)
    assert [f["bus_id"] for f in functions if nd.is_gpu(f)] == ["0000:00:06.0", "0000:00:07.0"]
    assert not nd.nvswitch_present(root, functions)


def test_nvswitch_by_pci_class_or_procfs(tmp_path):
    write(tmp_path, "/sys/bus/pci/devices/0000:05:00.0/vendor", "0x10de\n")
    write(tmp_path, "/sys/bus/pci/devices/0000:05:00.0/class", "0x068000\n")
    root = str(tmp_path)
    assert nd.nvswitch_present(root, nd.pci_functions(root))
    other = tmp_path / "other"
    write(other, "/proc/driver/nvidia-nvswitch/devices/0000:05:00.0", "")
    assert nd.nvswitch_present(str(other), [])


def test_nothing_loaded(tmp_path):
    assert nd.loaded_driver(str(tmp_path)) == {
        "loaded": False,
        "version": "",
        "branch": None,
        "flavour": "unknown",
    }


# --- plan / reboot_needed ------------------------------------------------------------------


def probe(loaded=False, version="", flavour="unknown", gpu=True, packages=()):
    return {
        "driver": {
            "loaded": loaded,
            "version": version,
            "branch": nd.branch_of(version),
            "flavour": flavour,
        },
        "gpu_present": gpu,
        "packages": [
            {"name": n, "version": v, "held": h, "state": "installed"} for n, v, h in packages
        ],
    }


def test_plan_h200_loaded_open_580_without_apt_packages_keeps_it():
    p = nd.plan(probe(True, "580.159.04", "open"), None, 580, "", ["nvidia-open-580"])
    assert p["action"] == "keep"
    assert p["loaded_ok"]
    assert "leaves it as it is" in p["reason"]


def test_plan_keeps_a_loaded_driver_installed_under_other_package_names():
    # e.g. Ubuntu's own nvidia-driver-580-server-open of the release that is loaded
    pkgs = [("libnvidia-compute-580", "580.159.04-0ubuntu1", False)]
    p = nd.plan(
        probe(True, "580.159.04", "open", packages=pkgs), None, 580, "", ["nvidia-open-580"]
    )
    assert p["action"] == "keep"
    stale = [("libnvidia-compute-580", "580.95.05-0ubuntu1", False)]
    p = nd.plan(
        probe(True, "580.159.04", "open", packages=stale), None, 580, "", ["nvidia-open-580"]
    )
    assert p["action"] == "install"


def test_plan_h200_real_probe_keeps_the_driver():
    # The probe's answer on the 2x H200 machine (tests/fixtures/gpu-hosts/h200x2-real-driver-check)
    real = probe(True, "580.159.04", "open")
    real["packages"] = [
        p
        for p in [
            {"name": "libxnvctrl0", "version": "510.47.03-0ubuntu4.24.04.1", "held": False},
        ]
        if nd.is_driver_family(p["name"], p["version"])
    ]
    assert nd.plan(real, None, 580, "", ["nvidia-open-580", "nvidia-persistenced"])["action"] == (
        "keep"
    )


def test_plan_prefers_preflight_facts_when_present():
    gpu = {"present": True, "driver": {"loaded": True, "version": "580.159.04", "module": "open"}}
    p = nd.plan(probe(gpu=False), gpu, 580, "", ["nvidia-open"])
    assert p["loaded"]["source"] == "gpuhost_gpu"
    assert p["action"] == "keep"


def test_plan_no_gpu_skips_unless_forced():
    assert nd.plan(probe(gpu=False), None, 580, "", ["nvidia-open"])["action"] == "skip"
    assert nd.plan(probe(gpu=False), None, 580, "", ["nvidia-open"], True)["action"] == "install"


def test_plan_exact_version_and_stale_packages():
    pkgs = [("nvidia-open", "570.172.08-1", True), ("nvidia-persistenced", "580.95.05-1", True)]
    p = nd.plan(probe(packages=pkgs), None, 580, "580.95.05", ["nvidia-open"])
    assert p["action"] == "install"
    assert p["want_glob"] == "580.95.05-*"
    assert p["stale"] == ["nvidia-open"]
    assert not p["installed_ok"]
    assert p["requests"] == ["nvidia-open=580.95.05-*"]


def test_plan_moves_stale_packages_but_not_branch_named_ones():
    pkgs = [
        ("nvidia-open", "580.95.05-1", True),
        ("nvidia-kernel-open-dkms", "580.95.05-1", True),
        ("libnvidia-compute-580", "580.95.05-0ubuntu1", True),
    ]
    p = nd.plan(probe(packages=pkgs), None, 570, "", ["nvidia-open", "nvidia-persistenced"])
    assert p["requests"] == [
        "nvidia-open=570.*",
        "nvidia-persistenced=570.*",
        "nvidia-kernel-open-dkms=570.*",
    ]


def test_plan_wrong_loaded_driver_not_from_apt_is_foreign():
    p = nd.plan(probe(True, "535.104.05", "proprietary"), None, 580, "", ["nvidia-open"])
    assert p["action"] == "foreign"


def test_plan_loaded_proprietary_580_is_not_suitable():
    pkgs = [("nvidia-open", "580.95.05-1", True)]
    p = nd.plan(
        probe(True, "580.95.05", "proprietary", packages=pkgs), None, 580, "", ["nvidia-open"]
    )
    assert p["action"] == "install"
    assert not p["loaded_ok"]
    assert p["installed_ok"]


def test_reboot_needed():
    assert nd.reboot_needed(probe(), "580.95.05-1")  # nothing loaded (a container)
    assert nd.reboot_needed(probe(True, "570.172.08", "open"), "580.95.05-1")
    assert not nd.reboot_needed(probe(True, "580.95.05", "open"), "580.95.05-0ubuntu1")
    assert not nd.reboot_needed(probe(), "")
