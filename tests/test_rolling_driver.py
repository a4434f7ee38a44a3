"""A driver change goes through `gpuhost update` (issue 19, item 2): role nvidia_driver's plan
says whether an install moves a package (`changes`), the rolling path drains the worker, stops
the server, installs, and gates the server again, one worker of a router pool at a time; and
provisioning refuses to move the driver under a routed worker (item 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_nvidia_driver as nd
from gpuhost_fakes import ROOT

PACKAGES = ["nvidia-open", "nvidia-driver-cuda", "nvidia-kernel-open-dkms"]


def _probe(version="", loaded=False, packages=PACKAGES):
    return {
        "driver": {
            "loaded": loaded,
            "version": version if loaded else "",
            "branch": nd.branch_of(version) if loaded else None,
            "flavour": "open" if loaded else "unknown",
        },
        "gpu_present": True,
        "packages": [
            {"name": n, "version": f"{version}-1", "held": True, "state": "installed"}
            for n in (packages if version else [])
        ],
    }


@pytest.mark.parametrize(
    ("installed", "branch", "exact", "packages", "changes"),
    [
        ("580.105.08", 580, "", PACKAGES, False),  # in place: an install finds nothing to move
        ("570.195.03", 580, "", PACKAGES, True),  # a branch change
        ("580.95.05", 580, "580.105.08", PACKAGES, True),  # a release pin moved
        ("580.105.08", 580, "", PACKAGES[:2], True),  # a wanted package is missing
        ("", 580, "", PACKAGES, True),  # a new host
    ],
)
def test_plan_says_whether_an_install_moves_anything(installed, branch, exact, packages, changes):
    plan = nd.plan(_probe(installed, bool(installed), packages), None, branch, exact, PACKAGES)
    assert plan["action"] == "install"
    assert plan["changes"] is changes, plan


def test_a_kept_or_skipped_driver_never_changes():
    keep = nd.plan(
        {"driver": {"loaded": True, "version": "580.159.04", "branch": 580, "flavour": "open"},
         "gpu_present": True, "packages": []},
        None, 580, "", ["nvidia-open-580"],
    )  # fmt: skip
    assert keep["action"] == "keep" and keep["changes"] is False
    skip = nd.plan({"driver": {}, "gpu_present": False, "packages": []}, None, 580, "", PACKAGES)
    assert skip["action"] == "skip" and skip["changes"] is False


def _block():
    tasks = yaml.safe_load((ROOT / "roles/rolling_update/tasks/main.yml").read_text())
    update = next(t for t in tasks if t.get("name") == "Update this host")
    return update


def _at(tasks, fragment):
    return next(i for i, t in enumerate(tasks) if fragment in t["name"])


def test_the_rolling_path_drains_stops_installs_then_gates():
    block = _block()["block"]
    assert _at(block, "NVIDIA driver changes (nvidia_driver preflight") < _at(block, "(python_env)")
    guard = block[_at(block, "one worker of the router pool")]
    assert "ansible_play_batch | length == 1" in guard["ansible.builtin.assert"]["that"]
    assert "--serial 1" in guard["ansible.builtin.assert"]["fail_msg"]
    assert _at(block, "one worker of the router pool") < _at(block, "(python_env)")
    order = [
        "Drain this worker",
        "Stop the server for the driver change",
        "Install the new NVIDIA driver",
        "Restart behind the health and correctness gate",
    ]
    assert [_at(block, name) for name in order] == sorted(_at(block, name) for name in order)
    install = block[_at(block, "Install the new NVIDIA driver")]
    assert install["ansible.builtin.include_role"] == {"name": "nvidia_driver"}
    assert (
        "_rolling_update_driver"
        in block[_at(block, "Decide whether this host restarts")]["ansible.builtin.set_fact"][
            "_rolling_update_changed"
        ]
    )


def test_a_failed_driver_change_starts_the_known_good_server_again():
    rescue = _block()["rescue"]
    restart = rescue[_at(rescue, "Start the known-good config again")]
    assert restart["ansible.builtin.include_role"] == {
        "name": "sglang_server",
        "tasks_from": "restore",
    }
    assert any("_rolling_update_stopped" in w for w in restart["when"])
    always = _block()["always"]
    add_back = always[_at(always, "Put the worker back into rotation")]
    assert any("restore.ok" in w for w in add_back["when"])
    record = always[_at(always, "Record the rollout state")]
    assert "['driver']" in record["ansible.builtin.set_fact"]["gpuhost_rollout"]["changed"]


def test_provisioning_refuses_a_driver_change_under_a_routed_worker():
    """Role rolling_update's rule (entry `refuse`, one place: tests/test_role_boundaries.py)
    stops the host before the install; molecule rolling_update's test_provision_routed.py
    shows it on a serving worker."""
    main = yaml.safe_load((ROOT / "roles/nvidia_driver/tasks/change.yml").read_text())
    routed = _at(main, "Hand a routed worker's driver change")
    assert _at(main, "Check what an install needs") < routed < _at(main, "Install")
    assert main[routed]["ansible.builtin.include_role"] == {
        "name": "rolling_update",
        "tasks_from": "refuse",
    }
    assert main[routed]["when"] == "_nvidia_driver_plan.changes | default(false) | bool"
    change = main[routed]["vars"]["rolling_update_refused_change"]
    assert "_nvidia_driver_plan.wanted" in change and "reboot" in change
    refuse = yaml.safe_load((ROOT / "roles/rolling_update/tasks/refuse.yml").read_text())
    fail = refuse[_at(refuse, "Refuse to take a routed worker down")]
    assert "gpuhost update -i INVENTORY --limit" in fail["ansible.builtin.fail"]["msg"]
    routed_rule = (ROOT / "roles/rolling_update/tasks/routed.yml").read_text()
    assert "not ansible_check_mode" in routed_rule


def test_site_reads_host_facts_under_any_tag_selection(tmp_path):
    """A stage tag on an import tags its plays: `gpuhost provision --tags driver` once ran role
    nvidia_driver with no facts ("first_found failed", seen in molecule rolling_update).
    site.yml reads this run's host (playbooks/facts.yml, preflight's read entry) in a play
    tagged always; ansible-playbook --list-tasks shows it for a role tag, before the roles
    that key on it (nvidia_driver; the server's unit)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu_hosts:\n      hosts:\n        h1:\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    ansible = Path(sys.executable).parent / "ansible-playbook"
    argv = [str(ansible), "-i", str(inventory), str(ROOT / "site.yml"), "--list-tasks"]
    for tag, consumer in (
        ("driver", "nvidia_driver : Validate the nvidia_driver settings"),
        ("server", "sglang_server : Validating arguments against arg spec 'main'"),
    ):
        out = subprocess.run(
            [*argv, "--tags", tag],
            capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        listing = out.stdout
        facts = listing.index("Read the GPU and host facts when preflight has not in this run")
        assert facts < listing.index(consumer), listing


@pytest.mark.parametrize(
    ("failed", "same", "stopped", "restore_ok", "state"),
    [
        (False, False, False, None, "updated"),
        (True, True, False, None, "rolled_back"),  # the gate failed, the old config is back
        (True, False, False, None, "failed"),  # the host holds neither config
        (True, True, True, True, "rolled_back"),  # driver failed, the old server started again
        (True, True, True, False, "failed"),  # driver failed and the old server did not start
    ],
)
def test_the_row_says_failed_when_a_stopped_server_did_not_come_back(
    failed, same, stopped, restore_ok, state
):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    always = _block()["always"]
    record = always[_at(always, "Record the rollout state")]
    variables = {k: trust_as_template(v) for k, v in record["vars"].items()}
    variables.update(
        _rolling_update_hashes={"live": "a"},
        _rolling_update_before={"live": "a" if same else "b"},
        _rolling_update_changed=True,
        _rolling_update_stopped=stopped,
        ansible_check_mode=False,
    )
    if failed:
        variables["_rolling_update_cause"] = "why"
    if restore_ok is not None:
        variables["gpuhost_sglang_server"] = {"restore": {"ok": restore_ok}}
    templar = Templar(loader=DataLoader(), variables=variables)
    assert templar.template(trust_as_template("{{ _state }}")).strip() == state
