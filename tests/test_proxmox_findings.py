"""Proxmox guest passthrough findings (docs/reference.md §5) from facts and dmesg text."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import collect_host
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi import collect_gpu
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_pci_gpus import collect_pci_gpus
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_proxmox import (
    proxmox_findings,
    scan_dmesg,
)
from gpuhost_fakes import FIXTURES, load_fixture

CLEAN = "[    4.1] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05\n"


def facts(name):
    probe = load_fixture(name)
    pci, _ = collect_pci_gpus(probe)
    gpu = collect_gpu(probe, pci_devices=pci)
    host = collect_host(probe)
    host["virt"]["gpu_passthrough"] = any(
        g["virtualization_mode"] == "Pass-Through" for g in gpu["gpus"]
    )
    return gpu, host


def by_check(findings):
    out = {f["check"]: f for f in findings}
    assert len(out) == len(findings), "check names must be unique"
    for f in findings:
        assert f["check"].startswith("proxmox_guest.")
        assert f["status"] in ("pass", "warn", "fail")
        assert f["message"] and "\n" not in f["message"]
        assert f["fix"] or f["status"] == "pass", f"{f['check']}: a warn or fail needs a fix"
    return out


def test_reference_vm_p2p_ns_consequences_and_clique_fix():
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    dmesg = (FIXTURES / "rtx-pro-6000x8-proxmox-p2p-ns" / "dmesg.txt").read_text()
    found = by_check(proxmox_findings(gpu, host, dmesg))
    assert found["proxmox_guest.virt"]["status"] == "pass"
    assert "Pass-Through" in found["proxmox_guest.virt"]["message"]
    assert found["proxmox_guest.machine_type"]["status"] == "pass"
    assert found["proxmox_guest.firmware"]["message"] == "OVMF firmware"
    assert found["proxmox_guest.bar1"]["status"] == "pass"
    p2p = found["proxmox_guest.p2p"]
    assert p2p["status"] == "warn"
    assert "SHM" in p2p["message"] and "--disable-custom-all-reduce" in p2p["message"]
    assert "x-nv-gpudirect-clique" in p2p["fix"] and "nccl#2335" in p2p["fix"]
    links = found["proxmox_guest.pcie_links"]
    assert links["status"] == "warn" and "GPU5: width x8 of x16" in links["message"]
    assert "pcie=1" in links["fix"]
    assert all(found[f"proxmox_guest.{k}"]["status"] == "pass" for k in ("dmesg_bar", "dmesg_xid"))


def test_h200_capture_is_clean_apart_from_unknown_platform():
    gpu, host = facts("h200x2-nvlink-firecracker")
    found = by_check(proxmox_findings(gpu, host, CLEAN))
    assert found["proxmox_guest.p2p"]["status"] == "pass"
    assert "NVLink" in found["proxmox_guest.p2p"]["message"]
    assert found["proxmox_guest.virt"]["status"] == "warn"
    assert "systemd-detect-virt not found" in found["proxmox_guest.virt"]["message"]
    assert not [f for f in found.values() if f["status"] == "fail"]


def test_bare_metal_skips_vm_platform_checks():
    gpu, host = facts("h100x8-sxm-nvswitch")
    found = by_check(proxmox_findings(gpu, host, CLEAN))
    assert found["proxmox_guest.virt"]["message"].startswith("bare metal")
    assert "proxmox_guest.machine_type" not in found
    assert "proxmox_guest.firmware" not in found


def test_bare_metal_p2p_fix_does_not_mention_clique():
    gpu, host = facts("l40sx4-pcie-two-numa")
    found = by_check(proxmox_findings(gpu, host, CLEAN))
    assert found["proxmox_guest.p2p"]["status"] == "warn"
    assert "partial" in found["proxmox_guest.p2p"]["message"]
    assert "clique" not in found["proxmox_guest.p2p"]["fix"]


def test_no_driver_guest():
    gpu, host = facts("no-driver-rtx-pro-6000x8")
    found = by_check(proxmox_findings(gpu, host, CLEAN))
    assert found["proxmox_guest.gpus"]["status"] == "warn"
    assert (
        "8 NVIDIA GPU(s) on the PCI bus, driver not loaded (bound to: none)"
        in (found["proxmox_guest.gpus"]["message"])
    )
    assert "proxmox_guest.bar1" not in found and "proxmox_guest.p2p" not in found


def test_no_gpu_container():
    gpu = {"present": False, "count": 0, "gpus": [], "pci_devices": [], "driver": {}}
    host = {"virt": {"type": "kvm", "container": "docker"}, "unknown": {}}
    found = by_check(proxmox_findings(gpu, host, ""))
    assert found["proxmox_guest.gpus"]["message"].startswith("no NVIDIA GPU present")
    assert "proxmox_guest.machine_type" not in found
    assert not [f for f in found.values() if f["status"] == "fail"]


BAD_DMESG = """\
[    0.512345] pci 0000:01:00.0: BAR 1: no space for [mem size 0x2000000000 64bit pref]
[    0.512346] pci 0000:01:00.0: BAR 1: failed to assign [mem size 0x2000000000 64bit pref]
[    5.100000] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:
[    5.100001] NVRM: BAR1 is 0M @ 0x0 (PCI:0000:01:00.0)
[    5.200000] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:762)
[  300.000000] NVRM: Xid (PCI:0000:02:00): 13, pid=1234, name=python3, Graphics Exception
[  400.000000] NVRM: Xid (PCI:0000:03:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
"""


def test_dmesg_patterns():
    hits = scan_dmesg(BAD_DMESG)
    assert len(hits["bar"]) == 2
    assert len(hits["nvrm_region"]) == 1
    assert len(hits["rminit"]) == 1
    assert hits["xid"] == [("PCI:0000:02:00", 13), ("PCI:0000:03:00", 79)]


def test_bad_dmesg_fails_with_mmio_fix():
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    found = by_check(proxmox_findings(gpu, host, BAD_DMESG))
    assert found["proxmox_guest.dmesg_bar"]["status"] == "fail"
    assert "X-PciMmio64Mb" in found["proxmox_guest.dmesg_bar"]["fix"]
    assert found["proxmox_guest.dmesg_nvrm"]["status"] == "fail"
    assert found["proxmox_guest.dmesg_rminit"]["status"] == "fail"
    xid = found["proxmox_guest.dmesg_xid"]
    assert xid["status"] == "fail" and "codes 13, 79 (severe: 79)" in xid["message"]


def test_recoverable_xid_only_warns_and_codes_are_configurable():
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    text = "[1.0] NVRM: Xid (PCI:0000:02:00): 13, pid=1, Graphics Exception\n"
    assert (
        by_check(proxmox_findings(gpu, host, text))["proxmox_guest.dmesg_xid"]["status"] == "warn"
    )
    strict = by_check(proxmox_findings(gpu, host, text, xid_fail_codes=[13]))
    assert strict["proxmox_guest.dmesg_xid"]["status"] == "fail"


def test_unreadable_dmesg_warns():
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    found = by_check(proxmox_findings(gpu, host, None))
    assert found["proxmox_guest.dmesg"]["status"] == "warn"
    assert "become" in found["proxmox_guest.dmesg"]["fix"]


def test_small_bar1_warns():
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    gpu = copy.deepcopy(gpu)
    gpu["gpus"][3]["bar1_total_mib"] = 256
    found = by_check(proxmox_findings(gpu, host, CLEAN))
    assert found["proxmox_guest.bar1"]["status"] == "warn"
    assert "GPU3 BAR1 256 MiB < VRAM 97887 MiB" in found["proxmox_guest.bar1"]["message"]
    assert "Resizable BAR" in found["proxmox_guest.bar1"]["fix"]


@pytest.mark.parametrize(
    ("product", "q35", "firmware", "machine_status", "firmware_status"),
    [
        ("Standard PC (i440FX + PIIX, 1996)", False, "seabios", "warn", "warn"),
        ("Standard PC (Q35 + ICH9, 2009)", True, "seabios", "pass", "warn"),
        ("unknown", "unknown", "unknown", "warn", "warn"),
    ],
)
def test_machine_type_and_firmware(product, q35, firmware, machine_status, firmware_status):
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    host = copy.deepcopy(host)
    host["virt"].update(product_name=product, q35=q35, firmware=firmware)
    found = by_check(proxmox_findings(gpu, host, CLEAN))
    assert found["proxmox_guest.machine_type"]["status"] == machine_status
    assert found["proxmox_guest.firmware"]["status"] == firmware_status
    if q35 is False:
        assert "machine: q35" in found["proxmox_guest.machine_type"]["fix"]
    if firmware == "seabios":
        assert "bios: ovmf" in found["proxmox_guest.firmware"]["fix"]
