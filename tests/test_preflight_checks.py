"""Preflight requirement checks, and the recorded real 2x H200 preflight run."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import merge_findings
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import collect_host
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi import collect_gpu
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_pci_gpus import collect_pci_gpus
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_proxmox import proxmox_findings
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_preflight import (
    GPU_MODELS,
    model_matches,
    preflight_findings,
    version_at_least,
)
from gpuhost_fakes import FIXTURES, load_fixture

REAL = FIXTURES / "h200x2-real-preflight"


def facts(name):
    probe = load_fixture(name, disks={"/": (500, 1000)})
    pci, _ = collect_pci_gpus(probe)
    return collect_gpu(probe, pci_devices=pci), collect_host(probe, ["/var/cache/gpuhost"])


def status(findings):
    return {f["check"]: f["status"] for f in findings}


def test_reference_vm_requirements():
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    req = {
        "expected_gpu_count": 8,
        "expected_gpu_model": "RTX PRO 6000",
        "min_driver_version": "570",
        "required_free_disk_gib": 460,
        "tp_size": 8,
        "p2p_required": False,
        "pcie_degraded_policy": "warn",
    }
    got = status(preflight_findings(gpu, host, req))
    assert got == {
        "preflight.systemd": "pass",
        "preflight.disk": "pass",
        "preflight.gpu_present": "pass",
        "preflight.gpu_count": "pass",
        "preflight.gpu_model": "pass",
        "preflight.driver": "pass",
        "preflight.tp_size": "pass",
        "preflight.p2p": "warn",
        "preflight.pcie_links": "warn",
    }
    strict = status(
        preflight_findings(gpu, host, {**req, "p2p_required": True, "pcie_degraded_policy": "fail"})
    )
    assert strict["preflight.p2p"] == "fail"
    assert strict["preflight.pcie_links"] == "fail"
    ignored = preflight_findings(gpu, host, {**req, "pcie_degraded_policy": "ignore"})
    assert status(ignored)["preflight.pcie_links"] == "pass"


@pytest.mark.parametrize(
    ("change", "check", "expected"),
    [
        ({"expected_gpu_count": 4}, "preflight.gpu_count", "fail"),
        ({"expected_gpu_model": "H100"}, "preflight.gpu_model", "fail"),
        ({"min_driver_version": "590"}, "preflight.driver", "fail"),
        ({"min_driver_version": "580.95.05"}, "preflight.driver", "pass"),
        ({"required_free_disk_gib": 501}, "preflight.disk", "fail"),
        ({"tp_size": 3}, "preflight.tp_size", "fail"),
        ({"tp_size": 16}, "preflight.tp_size", "fail"),
        ({"tp_size": 4}, "preflight.tp_size", "pass"),
        # A serving group of 2 hosts: TP 16 is 8 a node (fits the 8 GPUs), 24 is 12, 15 odd.
        ({"tp_size": 16, "nodes": 2}, "preflight.tp_size", "pass"),
        ({"tp_size": 24, "nodes": 2}, "preflight.tp_size", "fail"),
        ({"tp_size": 15, "nodes": 2}, "preflight.tp_size", "fail"),
    ],
)
def test_each_requirement_can_fail(change, check, expected):
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    assert status(preflight_findings(gpu, host, change))[check] == expected


def test_blackwell_with_proprietary_module_fails():
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    gpu = copy.deepcopy(gpu)
    gpu["driver"]["module"] = "proprietary"
    assert status(preflight_findings(gpu, host, {}))["preflight.driver_module"] == "fail"


def test_h100_old_driver_and_nvlink():
    gpu, host = facts("h100x8-sxm-nvswitch")
    found = preflight_findings(
        gpu, host, {"min_driver_version": "570", "expected_gpu_model": "H100"}
    )
    got = status(found)
    assert got["preflight.driver"] == "fail"
    assert got["preflight.gpu_model"] == "pass"
    p2p = next(f for f in found if f["check"] == "preflight.p2p")
    assert p2p["status"] == "pass" and "NVLink" in p2p["message"]
    assert "preflight.driver_module" not in got  # proprietary is fine on Hopper


def test_l40s_model_word_boundary_and_partial_p2p():
    gpu, host = facts("l40sx4-pcie-two-numa")
    assert (
        status(preflight_findings(gpu, host, {"expected_gpu_model": "L40S"}))["preflight.gpu_model"]
        == "pass"
    )
    assert (
        status(preflight_findings(gpu, host, {"expected_gpu_model": "L40"}))["preflight.gpu_model"]
        == "fail"
    )
    assert status(preflight_findings(gpu, host, {"p2p_required": True}))["preflight.p2p"] == "fail"


def test_no_driver_host_counts_pci_and_never_falsely_fails():
    gpu, host = facts("no-driver-rtx-pro-6000x8")
    req = {
        "expected_gpu_count": 8,
        "expected_gpu_model": "RTX PRO 6000",
        "min_driver_version": "580",
        "tp_size": 8,
        "p2p_required": True,
    }
    found = preflight_findings(gpu, host, req)
    got = status(found)
    assert "fail" not in got.values()
    assert got["preflight.gpu_count"] == "pass"
    assert got["preflight.gpu_model"] == "pass"  # from lspci names
    assert got["preflight.driver"] == "warn"
    assert got["preflight.p2p"] == "warn"  # cannot know before the driver
    assert got["preflight.secure_boot"] == "warn"
    by_check = {f["check"]: f for f in found}
    assert "(driver not loaded)" in by_check["preflight.gpu_present"]["message"]


def test_no_gpu_warns_unless_required():
    gpu = {"present": False, "count": 0, "gpus": [], "pci_devices": [], "driver": {}}
    host = {"disk": {}}
    found = preflight_findings(gpu, host, {"tp_size": 8, "p2p_required": True})
    assert found == [
        {
            "check": "preflight.gpu_present",
            "status": "warn",
            "message": "no NVIDIA GPU present: GPU checks skipped",
            "fix": "None needed on a test container; on a GPU host pass the GPUs through.",
        }
    ]
    required = preflight_findings(gpu, host, {"expected_gpu_count": 2})
    assert required[0]["status"] == "fail"
    assert required[0]["message"] == "no NVIDIA GPU present, 2 expected"


def test_every_listed_model_matches_its_own_name():
    for model in GPU_MODELS:
        assert model_matches(model, f"NVIDIA {model} something")
    assert model_matches("H200", "NVIDIA Corporation GH100 [H200 SXM 141GB]")
    assert not model_matches("H20", "NVIDIA H200")
    assert model_matches("RTX PRO 6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition")


def test_argument_spec_choices_equal_model_table():
    spec = yaml.safe_load(
        (FIXTURES.parent.parent.parent / "roles/preflight/meta/argument_specs.yml").read_text()
    )
    choices = spec["argument_specs"]["main"]["options"]["preflight_expected_gpu_model"]["choices"]
    assert set(choices) == {""} | set(GPU_MODELS)


def test_version_compare():
    assert version_at_least("580.159.04", "580") is True
    assert version_at_least("570.133.20", "580") is False
    assert version_at_least("580", "580.0.1") is False
    assert version_at_least("unknown", "570") is None


def test_merge_replaces_only_own_prefix():
    old = [
        {"check": "preflight.disk", "status": "fail"},
        {"check": "nccl.busbw", "status": "pass"},
    ]
    new = [{"check": "preflight.disk", "status": "pass"}]
    assert merge_findings(old, new, "preflight.") == [
        {"check": "nccl.busbw", "status": "pass"},
        {"check": "preflight.disk", "status": "pass"},
    ]
    assert merge_findings(None, new, "preflight.") == new


# ---------------------------------------------------------------- the real 2x H200 run


@pytest.fixture(scope="module")
def real():
    return json.loads((REAL / "facts.json").read_text())


def test_real_run_reports_two_h200_with_nvlink_p2p(real):
    gpu = real["gpuhost_gpu"]
    assert gpu["count"] == 2
    assert [g["name"] for g in gpu["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert {g["compute_capability"] for g in gpu["gpus"]} == {"9.0"}
    assert gpu["driver"]["module"] == "open"
    assert gpu["driver"]["version"].startswith("580.")
    assert gpu["p2p"]["status"] == "ok" and gpu["p2p"]["all_ok"] is True
    assert gpu["topology"]["nvlink"] is True
    assert gpu["topology"]["matrix"] == [["X", "NV18"], ["NV18", "X"]]


def test_real_run_virtualisation_unknown_with_reason(real):
    host = real["gpuhost_host"]
    assert host["virt"]["type"] == "unknown"
    assert "systemd-detect-virt not found" in host["unknown"]["virt.type"]
    assert host["virt"]["gpu_passthrough"] is True
    assert host["virt"]["hypervisor_flag"] is True


def test_real_run_has_no_false_failures(real):
    findings = real["gpuhost_findings"]
    assert [f for f in findings if f["status"] == "fail"] == []
    got = status(findings)
    for check in (
        "preflight.gpu_count",
        "preflight.gpu_model",
        "preflight.driver",
        "preflight.tp_size",
        "preflight.p2p",
        "preflight.pcie_links",
        "proxmox_guest.p2p",
        "proxmox_guest.bar1",
    ):
        assert got[check] == "pass", check


def test_real_run_findings_rederive_from_recorded_facts(real):
    """The current code, fed the recorded facts, reaches the recorded verdicts."""
    req = yaml.safe_load((REAL / "inventory-vars.yml").read_text())
    req = {k.removeprefix("preflight_"): v for k, v in req.items()}
    again = preflight_findings(real["gpuhost_gpu"], real["gpuhost_host"], req)
    again += proxmox_findings(real["gpuhost_gpu"], real["gpuhost_host"], "")
    recorded = status(real["gpuhost_findings"])
    assert {k: v for k, v in status(again).items() if k in recorded} == {
        k: v for k, v in recorded.items() if k in status(again)
    }


def test_real_run_logs_show_idempotence_and_check_mode():
    first = (REAL / "play.log").read_text()
    rerun = (REAL / "play-rerun.log").read_text()
    assert "changed=0" in first and "failed=0" in first and "rc=0" in first
    assert rerun.count("changed=0    unreachable=0    failed=0") == 2  # re-run and --check
    assert "check rc=0" in rerun


# ---------------------------------------------------------------- the real 1x H200 run

SINGLE = FIXTURES / "h200x1-real"


def test_real_single_gpu_run_facts_and_findings():
    real = json.loads((SINGLE / "facts.json").read_text())
    gpu = real["gpuhost_gpu"]
    assert gpu["count"] == 1 and [g["name"] for g in gpu["gpus"]] == ["NVIDIA H200"]
    assert gpu["p2p"]["status"] == "n/a" and gpu["topology"]["matrix"] == [["X"]]
    got = status(real["gpuhost_findings"])
    assert [c for c, s in got.items() if s == "fail"] == []
    assert got["preflight.p2p"] == got["proxmox_guest.p2p"] == "pass"
    # The current code, fed the recorded facts, reaches the recorded verdicts.
    req = yaml.safe_load((SINGLE / "inventory-vars.yml").read_text())
    req = {k.removeprefix("preflight_"): v for k, v in req.items()}
    again = preflight_findings(gpu, real["gpuhost_host"], req)
    again += proxmox_findings(gpu, real["gpuhost_host"], "")
    assert status(again) == got


def test_real_single_gpu_run_rejects_the_eight_gpu_profile_before_any_change():
    """On real hardware the default serving profile (TP 8, the reference host) is refused on a
    one-GPU host, naming the variable and what is allowed, with nothing changed."""
    log = (SINGLE / "preflight.log").read_text()
    assert (
        "sglang_server_tp_size: got 8; this host has 1 GPU(s) and the profile needs 8 per node"
        in log
    )
    assert "allowed: TP x PP / nodes <= 1" in log
    # The normal run and the --check --diff run stop the same way, changing nothing.
    assert log.count("changed=0    unreachable=0    failed=1") == 2
    assert "rc=2" in log and "check rc=2" in log


def test_systemd_finding_names_pid1_and_stops_the_gate():
    gpu = {"present": False, "count": 0, "gpus": [], "pci_devices": [], "driver": {}}

    def systemd_finding(host):
        found = [f for f in preflight_findings(gpu, host, {}) if f["check"] == "preflight.systemd"]
        return found[0] if found else None

    booted = systemd_finding({"disk": {}, "init": {"systemd": True, "pid1": "systemd"}})
    assert booted["status"] == "pass"
    plain = systemd_finding({"disk": {}, "init": {"systemd": False, "pid1": "process_api"}})
    assert plain["status"] == "fail"
    assert "PID 1 is 'process_api'" in plain["message"]
    assert "/lib/systemd/systemd" in plain["fix"]
    unsure = systemd_finding(
        {
            "disk": {},
            "init": {"systemd": "unknown", "pid1": "unknown"},
            "unknown": {"init.systemd": "/run/systemd/system absent and /proc/1/comm not readable"},
        }
    )
    assert unsure["status"] == "warn"
    assert "/proc/1/comm not readable" in unsure["message"]
    # a fact cache written before gpuhost_host.init existed: no finding, no crash
    assert systemd_finding({"disk": {}}) is None
