"""Host-side passthrough checks on recorded Proxmox node reports
(tests/fixtures/proxmox-node/, formats in its SOURCE.md): a good node passes every check,
a bad one fails each for its reason, with a fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_proxmox_host import (
    host_findings,
    parse_report,
)
from gpuhost_fakes import run_role_findings

FIX = Path(__file__).resolve().parent / "fixtures" / "proxmox-node"
SPEC = {
    "node": "pve1",
    "gpus": ["gpu0", "gpu1"],
    "memory_mib": 65536,
    "hugepages": "1024",
    "vram_mib": 97887,
}


def _by_check(findings):
    return {f["check"].removeprefix("proxmox_host."): f for f in findings}


def test_parse_report_reads_every_section():
    facts = parse_report((FIX / "good.txt").read_text())
    assert "iommu=pt" in facts["cmdline"]
    assert facts["groups"]["20"] == ["0000:01:00.0", "0000:01:00.1"]
    assert facts["hugepages"] == {0: {1048576: 32, 2048: 0}, 1: {1048576: 32, 2048: 0}}
    dev = facts["devices"]["0000:01:00.0"]
    assert dev["driver"] == "vfio-pci" and dev["reset_method"] == "flr bus"
    assert dev["bar1_bytes"] == 128 * 2**30
    assert dev["link"] == {"LnkCap": (32.0, 16), "LnkSta": (32.0, 16)}


def test_good_node_passes_everything():
    found = _by_check(host_findings((FIX / "good.txt").read_text(), SPEC))
    assert {k: f["status"] for k, f in found.items()} == dict.fromkeys(
        [
            "iommu",
            "cmdline",
            "mappings",
            "vfio",
            "iommu_groups",
            "reset_method",
            "bar1",
            "pcie_links",
            "hugepages",
        ],
        "pass",
    )


@pytest.mark.parametrize(
    ("check", "status", "words"),
    [
        ("cmdline", "warn", "iommu=pt missing"),
        ("acs_override", "warn", "pcie_acs_override=downstream"),
        ("mappings", "fail", "no PCI mapping on pve1 for gpu1"),
        ("vfio", "fail", "gpu0 (0000:01:00.0: nvidia)"),
        ("iommu_groups", "fail", "group 14 with 0000:00:01.0"),
        ("reset_method", "warn", "no reset method"),
        ("bar1", "warn", "BAR1 256 MiB < VRAM 97887 MiB"),
        ("pcie_links", "warn", "16GT/s x8 of 32GT/s x16"),
        ("hugepages", "fail", "6 free 1024 MiB hugepages (node0: 4, node1: 2), the VM needs 64"),
    ],
)
def test_bad_node_fails_each_check_with_a_fix(check, status, words):
    found = _by_check(host_findings((FIX / "bad.txt").read_text(), SPEC))
    assert found[check]["status"] == status
    assert words in found[check]["message"]
    assert found[check]["fix"]


def test_iommu_off_and_mappings_unreadable():
    found = _by_check(host_findings("### cmdline\nro quiet\n", SPEC))
    assert found["iommu"]["status"] == "fail"
    assert found["mappings"]["status"] == "fail"


def test_role_runs_read_only_on_a_machine_without_proxmox(tmp_path):
    """The role end to end on this machine (no pvesh, no GPUs): it reads, changes nothing and
    reports the missing mappings as a failed check instead of erroring out."""

    proc, findings = run_role_findings(tmp_path, "proxmox_host", "-e", "proxmox_host_gpus=['gpu0']")
    assert proc.returncode == 0, proc.stdout[-3000:]
    found = _by_check(findings)
    assert found["mappings"]["status"] == "fail"
    assert "cmdline" in found and "hugepages" in found
