"""Branch change 570 -> 580, and the reboot it needs: reported, not performed (containers).
Stand-in packages (a test double of NVIDIA's repository, ../README.md)."""

import pytest
from conftest import FAMILY, inventory_hosts, run_playbook, snapshot, started, task_results


@pytest.fixture(scope="module")
def to_580():
    names = inventory_hosts()
    before = started(names)
    out = run_playbook({"nvidia_driver_branch": 580, "nvidia_driver_version": ""})
    return out, snapshot(names), before, started(names)


def test_newest_580_never_590_all_packages_moved_and_held(host, to_580):
    out, state = to_580[0], to_580[1][host.backend.get_hostname()]
    assert out["rc"] == 0, out["stats"]
    assert state["versions"] == dict.fromkeys(FAMILY, "580.105.08-1")
    assert set(FAMILY) <= state["held"]
    assert "Pin: version 580.*" in state["pin"]


def test_reboot_reported_not_performed(host, to_580):
    out, _state, before, after = to_580
    name = host.backend.get_hostname()
    facts = task_results(out, "Record the reboot flag and the finding")[name]["ansible_facts"]
    assert facts["gpuhost_reboot_required"] is True
    assert [r["role"] for r in facts["gpuhost_reboot_reasons"]] == ["nvidia_driver"]
    message = task_results(out, "Say what the role did")[name]
    assert message["msg"].startswith(f"REBOOT REQUIRED on {name}: NVIDIA driver 580.105.08")
    findings = facts["gpuhost_findings"]
    assert [f["status"] for f in findings if f["check"] == "nvidia_driver.driver"] == ["warn"]
    # Not performed: the container (PID 1) was not restarted, and the run record says why.
    assert before[name] == after[name]
    activation = task_results(out, "Record what happened to the new driver")[name]
    activation = activation["ansible_facts"]["gpuhost_driver_activation"]
    assert activation["outcome"] == "reboot needed"
    assert activation["reason"].startswith("this is a container")
    assert "this is a container" in message["msg"]
