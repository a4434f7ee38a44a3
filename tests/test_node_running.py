"""The node checks of role proxmox_host for a VM that runs on the node now
(proxmox_host_purpose: check, what `gpuhost check` asks through playbooks/preflight.yml), on
made node reports (tests/fixtures/proxmox-node/, formats in its SOURCE.md): the VM's own
hugepages are held, not free, so they are reported and not judged; what a rebuild stops on is
a warn that says why; nothing is a fail; an unread node is a warn naming the node and why."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_node_running import (
    RUNNING,
    unread_finding,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_proxmox_host import host_findings

FIX = Path(__file__).resolve().parent / "fixtures" / "proxmox-node"
SPEC = {
    "node": "pve1",
    "gpus": ["gpu0", "gpu1"],
    "memory_mib": 65536,
    "hugepages": "1024",
    "vram_mib": 97887,
}
CHECK = {**SPEC, "purpose": "check"}
STOP = "gpuhost rebuild would stop here"


def _by_check(report, spec):
    return {f["check"].removeprefix("proxmox_host."): f for f in host_findings(report, spec)}


def test_a_running_vm_holding_its_hugepages_passes():
    report = (FIX / "running.txt").read_text()
    # before a rebuild, the same node reads as short of pages (the VM holds them all)
    assert _by_check(report, SPEC)["hugepages"]["status"] == "fail"
    assert _by_check(report, {**SPEC, "purpose": "rebuild"})["hugepages"]["status"] == "fail"
    found = _by_check(report, CHECK)
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
    message = found["hugepages"]["message"]
    assert message.startswith("not judged for a running VM: it holds its own 1024 MiB hugepages")
    assert "(node0: 0, node1: 0)" in message
    # the idle GPU's slower link is reported, not judged, for a running VM too
    assert "2.5GT/s x16 of 32GT/s x16" in found["pcie_links"]["message"]


@pytest.mark.parametrize(
    ("check", "words", "why"),
    [
        ("mappings", "no PCI mapping on pve1 for gpu1", "whatever the mappings say"),
        ("vfio", "gpu0 (0000:01:00.0: nvidia)", "runs with other GPUs than proxmox_vm_gpus"),
        ("iommu_groups", "group 14 with 0000:00:01.0", "the group is viable"),
    ],
)
def test_what_a_rebuild_stops_on_is_a_warn_for_a_running_vm(check, words, why):
    report = (FIX / "bad.txt").read_text()
    before = _by_check(report, SPEC)[check]
    found = _by_check(report, CHECK)[check]
    assert before["status"] == "fail" and found["status"] == "warn"
    assert words in found["message"] and why in found["message"]
    assert found["message"].endswith(STOP)
    assert found["fix"] == before["fix"] and found["fix"]


def test_nothing_the_node_says_for_a_running_vm_is_a_fail():
    report = (FIX / "bad.txt").read_text()
    rebuild, check = _by_check(report, SPEC), _by_check(report, CHECK)
    assert [f["status"] for f in check.values()].count("fail") == 0
    assert list(check) == list(rebuild)
    # what means the same for a running VM is the same finding
    for name in ("cmdline", "acs_override", "reset_method", "bar1", "pcie_links"):
        assert check[name] == rebuild[name], name
    assert check["hugepages"]["status"] == "pass"
    assert "free ones (node0: 4, node1: 2)" in check["hugepages"]["message"]


def test_every_check_a_rebuild_fails_on_says_what_it_means_for_a_running_vm():
    """A new fail in host_findings needs its reason in RUNNING (hugepages has its own)."""
    reports = [(FIX / "bad.txt").read_text(), "### cmdline\nquiet\n"]
    fails = {
        f["check"].removeprefix("proxmox_host.")
        for report in reports
        for f in host_findings(report, SPEC)
        if f["status"] == "fail"
    }
    assert fails - {"hugepages"} == set(RUNNING)


def test_iommu_off_and_mappings_unreadable_on_a_running_vm():
    found = _by_check("### cmdline\nquiet\n", CHECK)
    assert found["iommu"]["status"] == "warn"
    assert "may not be the node this VM runs on" in found["iommu"]["message"]
    assert found["mappings"]["status"] == "warn"
    assert found["mappings"]["message"].startswith("PCI resource mappings not readable")
    assert found["hugepages"]["message"].endswith(
        "free ones (none read) are what is left for other VMs"
    )


def test_hugepage_sizes_and_none_for_a_running_vm():
    report = (FIX / "running.txt").read_text()
    assert _by_check(report, {**CHECK, "hugepages": ""})["hugepages"]["message"] == (
        "the VM uses no hugepages"
    )
    two = _by_check(report, {**CHECK, "hugepages": "2"})["hugepages"]
    assert two["status"] == "pass" and "its own 2 MiB hugepages" in two["message"]


def test_an_unknown_purpose_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match="proxmox_host_purpose: got 'create', expected one of"):
        host_findings("", {**SPEC, "purpose": "create"})


def test_an_unread_node_is_a_warn_naming_it_and_why():
    found = unread_finding(
        "pve1", "192.0.2.10", "Failed to connect to the host via ssh:\n  refused"
    )
    assert found["check"] == "proxmox_host.node" and found["status"] == "warn"
    assert found["message"].startswith(
        "the Proxmox node was not read: proxmox_vm_node_ssh_host=pve1 (192.0.2.10): "
        "Failed to connect to the host via ssh: refused; the guest's checks ran"
    )
    assert "proxmox_vm_host_checks: false" in found["fix"]
    long = unread_finding("pve1", "pve1", "x" * 1000)["message"]
    assert "x" * 300 in long and "x" * 301 not in long
    assert "no reason given" in unread_finding("pve1", "pve1", "")["message"]
