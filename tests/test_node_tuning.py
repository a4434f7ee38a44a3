"""The node tuning checks of role proxmox_host (issue 32) on made node reports
(tests/fixtures/proxmox-node/tuning-*.txt, formats in its SOURCE.md): the CPU governor, the
C-states and ACS between the mapped GPUs, each with a pass, a warn and a not-checked case;
and the node's PCIe link finding, which cannot tell an idle GPU's slower link from a fault."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_node_tuning import (
    parse_report,
    tuning_findings,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_proxmox_host import host_findings

FIX = Path(__file__).resolve().parent / "fixtures" / "proxmox-node"
TWO = {"gpus": ["gpu0", "gpu1"], "gpu_clique": False}


def _found(name, spec=TWO):
    text = (FIX / f"tuning-{name}.txt").read_text()
    return {f["check"].removeprefix("proxmox_host."): f for f in tuning_findings(text, spec)}


def test_parse_reads_governors_idle_states_and_the_bridges():
    facts = parse_report((FIX / "tuning-bad.txt").read_text())
    assert len(facts["governors"]) == 16 and facts["governors"][9] == "schedutil"
    assert facts["cpufreq_driver"] == "intel_pstate" and facts["cpuidle_driver"] == "intel_idle"
    assert facts["idle"][0][3] == {"name": "C6", "latency": 170, "disable": 0}
    assert facts["idle"][15][3] == {"disable": 0}
    assert facts["upstream"]["0000:03:00.0"] == ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"]
    assert facts["acs"]["0000:02:00.0"]["ReqRedir"] is True
    assert facts["acs"]["0000:02:00.0"]["EgressCtrl"] is False
    assert facts["acs"]["0000:01:00.0"] == {}  # no ACS capability: nothing redirects
    unread = parse_report((FIX / "tuning-unreadable.txt").read_text())
    assert unread["acs"]["0000:00:01.0"] is None
    assert parse_report("### acs 0000:00:01.0\nlspci: not found\n")["acs"]["0000:00:01.0"] is None


def test_tuned_node_passes():
    found = _found("good")
    assert {k: f["status"] for k, f in found.items()} == {
        "cpu_governor": "pass",
        "cstates": "pass",
        "acs": "pass",
    }
    assert "performance on all 16 CPUs (intel_pstate)" in found["cpu_governor"]["message"]
    # C6 is there but disabled on every CPU
    assert "no idle state deeper than 10 us" in found["cstates"]["message"]
    # ACS on, no P2P asked of the VM: it costs nothing, and the finding says why
    assert "costs nothing while the VM has no P2P" in found["acs"]["message"]


@pytest.mark.parametrize(
    ("check", "words", "fix"),
    [
        ("cpu_governor", "powersave on 8, schedutil on 8 of 16 CPUs", "cpupower frequency-set"),
        ("cstates", "C6 (170 us) on 16 of 16 CPUs", "intel_idle.max_cstate=1"),
    ],
)
def test_untuned_node_warns_with_the_fix(check, words, fix):
    found = _found("bad")[check]
    assert found["status"] == "warn"
    assert words in found["message"]
    assert fix in found["fix"]


def test_acs_between_gpus_behind_one_switch_warns_when_the_vm_asks_for_p2p():
    found = _found("bad", {**TWO, "gpu_clique": True})["acs"]
    assert found["status"] == "warn"
    # the switch's downstream ports, not the root port both GPUs share above the switch
    assert "0000:02:00.0 ReqRedir+ CmpltRedir+; 0000:02:01.0" in found["message"]
    assert "0000:00:01.0" not in found["message"]
    assert "nccl#2079" in found["message"] and "ECAP_ACS+0x6.w=0000" in found["fix"]
    assert _found("good", {**TWO, "gpu_clique": True})["acs"]["status"] == "warn"


def test_acs_off_between_the_gpus_passes_with_p2p():
    text = (
        (FIX / "tuning-bad.txt")
        .read_text()
        .replace("ReqRedir+ CmpltRedir+", "ReqRedir- CmpltRedir-")
    )
    found = {f["check"]: f for f in tuning_findings(text, {**TWO, "gpu_clique": True})}
    assert found["proxmox_host.acs"]["status"] == "pass"
    assert "no ACS redirect on the 2 bridge(s)" in found["proxmox_host.acs"]["message"]


def test_unreadable_sources_are_not_checked():
    found = _found("unreadable", {**TWO, "gpu_clique": True})
    assert {f["status"] for f in found.values()} == {"pass"}
    assert all(f["message"].startswith("not checked:") for f in found.values())
    assert "0000:00:01.0, 0000:00:03.0 not readable" in found["acs"]["message"]


def test_one_gpu_no_gpus_and_no_cpuidle_driver():
    one = "### upstream 0000:01:00.0\n/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0\n"
    acs = {f["check"]: f for f in tuning_findings(one, {"gpus": ["gpu0"]})}["proxmox_host.acs"]
    assert acs["status"] == "pass" and acs["message"].startswith("one GPU")
    assert [f["check"] for f in tuning_findings(one, {"gpus": []})] == [
        "proxmox_host.cpu_governor",
        "proxmox_host.cstates",
    ]
    none = tuning_findings("### cpuidle_driver\nnone\n### cpuidle\n", {"gpus": []})[1]
    assert none["status"] == "pass" and "no deep C-states" in none["message"]


def test_a_deep_state_on_some_cpus_only_names_them():
    text = (
        (FIX / "tuning-good.txt")
        .read_text()
        .replace("cpu5/cpuidle/state3/disable:1", "cpu5/cpuidle/state3/disable:0")
    )
    found = {f["check"]: f for f in tuning_findings(text, TWO)}["proxmox_host.cstates"]
    assert found["status"] == "warn" and "C6 (170 us) on 1 of 16 CPUs" in found["message"]


NODE = (FIX / "good.txt").read_text()
SPEC = {"node": "pve1", "gpus": ["gpu0", "gpu1"], "memory_mib": 65536, "hugepages": "1024"}


def _links(sta):
    text = NODE.replace("LnkSta:\tSpeed 32GT/s, Width x16", sta, 1)
    return {f["check"]: f for f in host_findings(text, SPEC)}["proxmox_host.pcie_links"]


def test_node_link_speed_below_cap_alone_is_idle_not_judged():
    found = _links("LnkSta:\tSpeed 2.5GT/s (downgraded), Width x16")
    assert found["status"] == "pass"
    assert "gpu0 2.5GT/s x16 of 32GT/s x16" in found["message"]
    assert "idle GPU" in found["message"] and "gpuhost doctor" in found["message"]


def test_node_link_narrower_than_cap_warns_pointing_at_doctor():
    found = _links("LnkSta:\tSpeed 32GT/s, Width x8 (downgraded)")
    assert found["status"] == "warn" and "gpu0 32GT/s x8 of 32GT/s x16" in found["message"]
    assert "gpuhost doctor" in found["fix"]
    assert _links("LnkSta:\tSpeed 32GT/s, Width x16")["message"] == (
        "GPU links at full width and speed"
    )


def test_role_adds_the_node_tuning_findings_read_only(tmp_path):
    """The role end to end on this machine (no pvesh, no GPUs mapped): the node tuning block
    reads this machine's /sys, changes nothing, and adds cpu_governor and cstates next to the
    role's own findings without dropping them."""
    import re

    from gpuhost_fakes import run_role_findings

    proc, findings = run_role_findings(tmp_path, "proxmox_host", "--check")
    assert proc.returncode == 0, proc.stdout[-3000:]
    # the one change is the test's own copy of the findings
    assert re.search(r"changed=1\s+unreachable=0\s+failed=0", proc.stdout), proc.stdout[-2000:]
    assert proc.stdout.count("changed: [localhost]") == 1
    checks = [f["check"] for f in findings]
    assert {"proxmox_host.cpu_governor", "proxmox_host.cstates", "proxmox_host.iommu"} <= set(
        checks
    )
    assert len(checks) == len(set(checks))
