"""Host facts (gpuhost_host) parsers and collector, on fixtures and on a real temp tree."""

from __future__ import annotations

import os

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import (
    UNKNOWN,
    Probe,
    collect_disk,
    collect_host,
    dmi_q35,
    firmware_kind,
    os_family,
    parse_cmdline_iommu,
    parse_detect_virt,
    parse_meminfo,
    parse_os_release,
    parse_systemd_version,
    parse_thp,
    read_kernel_log,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_pci_gpus import (
    collect_pci_gpus,
    link_gen,
    parse_lspci,
)
from gpuhost_fakes import FakeProbe, load_fixture


def test_proxmox_guest_host_facts():
    host = collect_host(load_fixture("rtx-pro-6000x8-proxmox-p2p-ns"), ["/var/cache/gpuhost"])
    assert host["virt"]["type"] == "kvm"
    assert host["virt"]["container"] == "none"
    assert host["virt"]["q35"] is True
    assert host["virt"]["firmware"] == "ovmf"
    assert host["virt"]["hypervisor_flag"] is True
    assert host["secure_boot"] == "disabled"
    assert host["hugepages"] == {"total": 0, "free": 0, "size_kib": 2048, "transparent": "madvise"}
    assert host["numa_nodes"] == 1
    assert host["cpu_count"] == 64
    assert host["kernel"] == {"release": "6.8.0-60-generic"}
    assert host["os"] == {
        "id": "ubuntu",
        "version_id": "24.04",
        "pretty_name": "Ubuntu 24.04.2 LTS",
        "family": "ubuntu",
    }
    assert host["arch"] == "x86_64"
    assert host["init"] == {"systemd": True, "pid1": "systemd", "systemd_version": 255}
    assert host["ib_present"] is False
    assert host["iommu"]["groups"] == 0
    assert host["disk"]["/var/cache/gpuhost"] == {
        "probe_path": "/",
        "free_gib": 100,
        "total_gib": 200,
    }
    assert host["unknown"] == {}


def test_bare_metal_h100_host_facts():
    host = collect_host(load_fixture("h100x8-sxm-nvswitch"))
    assert host["virt"]["type"] == "none"  # systemd-detect-virt prints none and exits 1
    assert host["virt"]["q35"] is False
    assert host["virt"]["firmware"] == "uefi"
    assert host["secure_boot"] == "enabled"
    assert host["numa_nodes"] == 2
    assert host["ib_present"] is True
    assert host["ib_devices"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert host["iommu"] == {
        "groups": 160,
        "cmdline_flags": ["intel_iommu=on", "iommu=pt"],
        "acs_override": False,
    }
    assert host["hugepages"]["total"] == 1024 and host["hugepages"]["size_kib"] == 1048576


def test_firecracker_capture_unknowns_have_reasons():
    host = collect_host(load_fixture("h200x2-nvlink-firecracker"))
    assert host["virt"]["type"] == UNKNOWN
    assert host["unknown"]["virt.type"] == (
        "systemd-detect-virt not found; cpu hypervisor flag set, hypervisor not identified (no DMI)"
    )
    assert host["virt"]["q35"] == UNKNOWN
    assert host["unknown"]["virt.q35"] == "/sys/class/dmi/id not readable"
    assert host["virt"]["firmware"] == UNKNOWN
    assert host["secure_boot"] == "disabled"  # no EFI, so no Secure Boot
    assert host["kernel"]["release"] == "6.18.44-fc-v657-gpu"
    assert host["memory_total_mib"] == 263998500 // 1024


def test_l40s_legacy_bios_without_mokutil():
    host = collect_host(load_fixture("l40sx4-pcie-two-numa"))
    assert host["virt"]["firmware"] == "bios"
    assert host["secure_boot"] == "disabled"
    assert host["numa_nodes"] == 2


def test_empty_machine_never_crashes():
    host = collect_host(FakeProbe(disks={}), ["/models"])
    assert host["virt"]["type"] == UNKNOWN
    assert host["numa_nodes"] == UNKNOWN
    assert host["disk"]["/models"]["free_gib"] == UNKNOWN
    assert "disk./models" in host["unknown"]
    assert host["unknown"]["numa_nodes"] == "/sys/devices/system/node not readable"


def test_secure_boot_from_efivar_when_mokutil_missing():
    probe = FakeProbe(
        files={
            "/sys/firmware/efi/fw_platform_size": "64",
            "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c": (
                b"\x06\x00\x00\x00\x01"
            ),
        }
    )
    assert collect_host(probe)["secure_boot"] == "enabled"
    probe.files.pop("/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
    host = collect_host(probe)
    assert host["secure_boot"] == UNKNOWN
    assert "mokutil not found" in host["unknown"]["secure_boot"]


def test_container_evidence_without_systemd_detect_virt():
    probe = FakeProbe(files={"/.dockerenv": ""})
    assert collect_host(probe)["virt"]["container"] == "docker"
    probe = FakeProbe(files={"/proc/1/environ": "PATH=/bin\0container=lxc\0"})
    assert collect_host(probe)["virt"]["container"] == "lxc"


def test_virt_from_dmi_when_tool_missing():
    probe = FakeProbe(files={"/sys/class/dmi/id/sys_vendor": "QEMU\n"})
    assert collect_host(probe)["virt"]["type"] == "kvm"


@pytest.mark.parametrize(
    ("rc", "out", "expected"),
    [
        (0, "kvm\n", "kvm"),
        (1, "none\n", "none"),
        (0, "", None),
        (2, "", None),
        (1, "oracle", "oracle"),
    ],
)
def test_parse_detect_virt(rc, out, expected):
    assert parse_detect_virt(rc, out) == expected


def test_small_parsers():
    assert dmi_q35("Standard PC (Q35 + ICH9, 2009)") is True
    assert dmi_q35("Standard PC (i440FX + PIIX, 1996)") is False
    assert dmi_q35(None) == UNKNOWN
    assert firmware_kind(True, "EDK II", True) == "ovmf"
    assert firmware_kind(False, "SeaBIOS", True) == "seabios"
    assert firmware_kind(False, None, False) == UNKNOWN
    assert parse_meminfo("MemTotal:  100 kB\nbogus\n") == {"MemTotal": 100}
    assert parse_thp("always [madvise] never") == "madvise"
    assert parse_thp("") == UNKNOWN
    assert link_gen("32.0 GT/s PCIe") == 5 and link_gen("2.5 GT/s") == 1 and link_gen("") is None
    assert (
        parse_cmdline_iommu("ro amd_iommu=on iommu=pt pcie_acs_override=downstream,multifunction")[
            "acs_override"
        ]
        is True
    )


def test_parse_lspci_short_and_long_bus_ids():
    text = (
        "0000:01:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell "
        "Server Edition] [10de:2bb5] (rev a1)\n"
        "02:00.0 VGA compatible controller [0300]: NVIDIA Corporation AD102 [GeForce RTX 4090] "
        "[10de:2684] (rev a1)\n"
    )
    names = parse_lspci(text)
    assert names["0000:01:00.0"].endswith("[RTX PRO 6000 Blackwell Server Edition]")
    assert names["0000:02:00.0"] == "NVIDIA Corporation AD102 [GeForce RTX 4090]"


# ---------------------------------------------------------------- the real Probe, on a temp tree


def _tree(root, files):
    for rel, text in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_real_probe_reads_sysfs_tree(tmp_path):
    dev = "/sys/bus/pci/devices/0000:01:00.0"
    _tree(
        tmp_path,
        {
            f"{dev}/vendor": "0x10de\n",
            f"{dev}/class": "0x030200\n",
            f"{dev}/device": "0x2bb5\n",
            f"{dev}/numa_node": "-1\n",
            f"{dev}/current_link_speed": "32.0 GT/s PCIe\n",
            f"{dev}/max_link_speed": "32.0 GT/s PCIe\n",
            f"{dev}/current_link_width": "8\n",
            f"{dev}/max_link_width": "16\n",
            # The GPU's HDMI audio function is not a GPU.
            "/sys/bus/pci/devices/0000:01:00.1/vendor": "0x10de\n",
            "/sys/bus/pci/devices/0000:01:00.1/class": "0x040300\n",
            "/sys/bus/pci/devices/0000:00:1f.0/vendor": "0x8086\n",
            "/sys/bus/pci/devices/0000:00:1f.0/class": "0x060100\n",
            "/sys/bus/pci/drivers/vfio-pci/.keep": "",
        },
    )
    os.symlink(tmp_path / "sys/bus/pci/drivers/vfio-pci", tmp_path / dev.lstrip("/") / "driver")
    probe = Probe(root=str(tmp_path), timeout=5)
    # Keep the real tools off this test: lspci on the test machine would describe its own bus.
    probe.run = lambda argv: (None, "", f"{argv[0]} not found")
    devices, unknown = collect_pci_gpus(probe)
    assert len(devices) == 1
    assert devices[0]["kernel_driver"] == "vfio-pci"
    assert devices[0]["link"] == {
        "gen_current": 5,
        "gen_max": 5,
        "width_current": 8,
        "width_max": 16,
    }
    assert unknown == {"pci_devices.0.name": "lspci not found"}


def test_real_probe_runs_tools_with_timeout(tmp_path):
    probe = Probe(root=str(tmp_path), timeout=1)
    assert probe.run(["definitely-not-a-tool-gpuhost"])[0] is None
    rc, out, _ = probe.run(["sh", "-c", "echo hi"])
    assert (rc, out) == (0, "hi\n")
    rc, _, err = probe.run(["sleep", "5"])
    assert rc == 124 and "timed out" in err


def test_disk_measures_nearest_existing_ancestor(tmp_path):
    (tmp_path / "var" / "cache").mkdir(parents=True)
    probe = Probe(root=str(tmp_path))
    disk, unknown = collect_disk(probe, ["/var/cache/gpuhost/models"])
    entry = disk["/var/cache/gpuhost/models"]
    assert entry["probe_path"] == "/var/cache"
    assert isinstance(entry["free_gib"], int) and entry["total_gib"] >= entry["free_gib"]
    assert unknown == {}


@pytest.mark.parametrize(
    ("files", "dirs", "expected", "reason"),
    [
        # sd_booted(3): the directory /run/systemd/system exists
        ({"/proc/1/comm": "systemd\n"}, {"/run/systemd/system": []}, (True, "systemd"), None),
        # a container whose PID 1 is a shell or a process supervisor
        ({"/proc/1/comm": "process_api\n"}, {}, (False, "process_api"), None),
        ({"/proc/1/comm": "bash\n"}, {}, (False, "bash"), None),
        # systemd booted but /proc/1/comm hidden (hidepid): still booted
        ({}, {"/run/systemd/system": []}, (True, UNKNOWN), None),
        # nothing to go on: unknown, with the reason
        ({}, {}, (UNKNOWN, UNKNOWN), "/run/systemd/system absent and /proc/1/comm not readable"),
    ],
)
def test_init_system(files, dirs, expected, reason):
    host = collect_host(FakeProbe(files=files, dirs=dirs))
    assert (host["init"]["systemd"], host["init"]["pid1"]) == expected
    assert host["unknown"].get("init.systemd") == reason


# ------------------------------------------- what the roles key on (ansible's setup no longer runs)

DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
UBUNTU_2204 = 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n'
MINT_22 = 'ID=linuxmint\nID_LIKE="ubuntu debian"\nVERSION_ID="22"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DEBIAN_12, ("debian", "12", "debian")),
        (UBUNTU_2204, ("ubuntu", "22.04", "debian")),
        # ID_LIKE lists the closest relative first: the last one is the family.
        (MINT_22, ("linuxmint", "22", "debian")),
        ("", (UNKNOWN, UNKNOWN, UNKNOWN)),
    ],
)
def test_os_release_gives_id_version_and_family(text, expected):
    found = parse_os_release(text)
    assert (found["id"], found["version_id"], found["family"]) == expected


def test_os_family_without_id_like_is_the_id():
    assert os_family("debian", "") == "debian"
    assert os_family("rocky", "rhel centos fedora") == "fedora"


@pytest.mark.parametrize(
    ("rc", "out", "expected"),
    [
        (0, "systemd 252 (252.33-1~deb12u1)\n+PAM +AUDIT -GCRYPT\n", 252),
        (0, "systemd 257 (257.9-1~deb13u1)\n", 257),
        (1, "systemd 252 (252.6-1)\n", None),  # a failed run says nothing
        (0, "something else\n", None),
        (None, "", None),  # no systemctl
    ],
)
def test_parse_systemd_version(rc, out, expected):
    assert parse_systemd_version(rc, out) == expected


@pytest.mark.parametrize(
    ("dirs", "command", "version", "reason"),
    [
        # booted with systemd: its version, read from systemctl
        ({"/run/systemd/system": []}, (0, "systemd 252 (252.6-1)\n", ""), 252, None),
        # booted with systemd, systemctl missing: unknown, saying why
        ({"/run/systemd/system": []}, None, UNKNOWN, "systemctl not found"),
        # not booted with systemd (a container's shell): the question does not apply
        ({}, (0, "systemd 252 (252.6-1)\n", ""), "n/a", None),
    ],
)
def test_systemd_version_only_where_systemd_runs(dirs, command, version, reason):
    commands = {("systemctl", "--version"): command} if command else {}
    probe = FakeProbe(files={"/proc/1/comm": "bash\n"}, dirs=dirs, commands=commands)
    host = collect_host(probe)
    assert host["init"]["systemd_version"] == version
    assert host["unknown"].get("init.systemd_version") == reason


def test_arch_and_os_of_the_host():
    probe = FakeProbe(files={"/etc/os-release": UBUNTU_2204}, machine="aarch64")
    host = collect_host(probe)
    assert host["arch"] == "aarch64"
    assert (host["os"]["id"], host["os"]["family"]) == ("ubuntu", "debian")
    assert "os.id" not in host["unknown"]
    assert collect_host(FakeProbe())["unknown"]["os.id"] == (
        "/etc/os-release not readable or has no ID"
    )


def test_real_probe_machine_is_unames():
    assert Probe().machine() == os.uname().machine


# ---------------------------------------------------------------- the kernel log (proxmox_guest)


def test_kernel_log_is_dmesg_text_or_none_with_the_reason():
    text = "[    1.0] NVRM: loading NVIDIA UNIX Open Kernel Module\n"
    probe = FakeProbe(commands={("dmesg",): (0, text, "")})
    assert read_kernel_log(probe) == (text, "")
    assert probe.calls == [("dmesg",)]
    denied = "dmesg: read kernel buffer failed: Operation not permitted"
    restricted = FakeProbe(commands={("dmesg",): (1, "", denied + "\n")})
    assert read_kernel_log(restricted) == (None, denied)
    assert read_kernel_log(FakeProbe()) == (None, "dmesg not found")
    assert read_kernel_log(FakeProbe(commands={("dmesg",): (2, "", "")})) == (
        None,
        "dmesg exited 2",
    )
