"""A rolling update's batches with serving groups (issue 30): plugins/plugin_utils/
gpuhost_rollout_plan.py, the filters gpuhost.gpu.rollout_serial / rollout_plan, and the
playbooks that use them (playbooks/update.yml, rollback.yml), run by the real ansible-playbook.

A group is one unit: its hosts in one batch, `serial` counts units; a run that takes part of a
group, or an inventory that puts another host between a group's hosts, is refused before any
change, naming the group, its hosts and the fix.
"""

from __future__ import annotations

import os
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.filter import gpuhost_rollout as rollout
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_rollout_plan as plan
from gpuhost_fakes import ROOT, run_playbook

PLAN_PLAY = "Plan the batches (a serving group is one unit)"
ROLLING_PLAYS = {
    "update.yml": "Rolling update of the SGLang workers",
    "rollback.yml": "Roll back the SGLang workers to their previous config",
}
FIRST_CHANGE = {
    "update.yml": "Start the downloads of a new model revision on every host",
    "rollback.yml": ROLLING_PLAYS["rollback.yml"],
}


def fleet(order=("solo1", "ga", "gb", "solo2", "solo3"), **pins):
    """Hostvars in inventory order: hosts named g* are group g, the others alone."""
    hostvars = {}
    for name in order:
        hostvars[name] = {
            "sglang_server_group": "g" if name.startswith("g") else "",
            "sglang_server_node_rank": pins.get(name, -1),
            "sglang_server_group_address": f"{name}.lan",
            "sglang_server_dist_init_port": 20000,
        }
    return hostvars


@pytest.mark.parametrize(
    ("serial", "sizes"),
    [
        (1, [1, 2, 1, 1]),
        ("2", [3, 2]),
        (3, [4, 1]),
        ("50%", [3, 2]),
        ("100%", [5]),
        ("1%", [1, 2, 1, 1]),
    ],
)
def test_serial_counts_units_and_a_group_is_one(serial, sizes):
    hosts = list(fleet())
    assert plan.serial_sizes(hosts, fleet(), serial) == sizes


def test_no_group_is_plain_serial():
    hostvars = fleet(order=("a", "b", "c"))
    assert plan.serial_sizes(list(hostvars), hostvars, 2) == [2, 1]


def test_a_pinned_rank_0_changes_nothing_of_the_batches():
    hostvars = fleet(gb=0)
    assert plan.serial_sizes(list(hostvars), hostvars, 1) == [1, 2, 1, 1]


def test_a_limit_that_takes_part_of_a_group_is_refused_naming_it_and_the_fix():
    with pytest.raises(plan.PlanError) as err:
        plan.serial_sizes(["solo1", "gb"], fleet(), 1)
    message = str(err.value)
    assert message.startswith("serving group g: this run takes gb but not ga;")
    assert "--limit ga,gb" in message


def test_hosts_of_a_group_apart_in_the_play_order_are_refused_naming_who_stands_between():
    hostvars = fleet(order=("ga", "solo1", "solo2", "gb"))
    with pytest.raises(plan.PlanError) as err:
        plan.serial_sizes(list(hostvars), hostvars, 1)
    message = str(err.value)
    assert "serving group g: its hosts ga, gb are not next to each other" in message
    assert "(solo1, solo2 between them)" in message
    assert "list the hosts of group g next to each other in the inventory" in message


def test_the_filters_say_the_same_as_data_and_as_an_error():
    hostvars = fleet()
    assert rollout.rollout_serial(list(hostvars), hostvars, 2) == [3, 2]
    assert rollout.rollout_plan(list(hostvars), hostvars, 2) == {
        "batches": [["solo1", "ga", "gb"], ["solo2", "solo3"]],
        "error": "",
    }
    with pytest.raises(AnsibleFilterError, match="this run takes ga but not gb"):
        rollout.rollout_serial(["ga"], hostvars, 1)
    assert "this run takes ga but not gb" in rollout.rollout_plan(["ga"], hostvars)["error"]


@pytest.mark.parametrize("serial", [0, "0", "x", "101%", "-1"])
def test_a_bad_serial_names_the_variable(serial):
    hostvars = fleet()
    with pytest.raises(AnsibleFilterError, match=r"^rolling_update_serial: got .*; allowed"):
        rollout.rollout_serial(list(hostvars), hostvars, serial)


def test_a_bad_group_setting_is_a_filter_error():
    hostvars = fleet(ga=5)
    with pytest.raises(AnsibleFilterError, match="sglang_server_node_rank: got 5 on ga"):
        rollout.rollout_serial(list(hostvars), hostvars, 1)


# --- the playbooks, with the real ansible-playbook -----------------------------------------


def _plays(name):
    return yaml.safe_load((ROOT / "playbooks" / name).read_text())


@pytest.mark.parametrize("name", sorted(ROLLING_PLAYS))
def test_the_plan_comes_before_any_change_and_the_rolling_play_uses_the_filter(name):
    names = [p.get("name") for p in _plays(name)]
    assert names.index(PLAN_PLAY) < names.index(FIRST_CHANGE[name])
    assert names.index(PLAN_PLAY) > 0, "serial needs hostvars: an earlier play"
    rolling = next(p for p in _plays(name) if p.get("name") == ROLLING_PLAYS[name])
    assert "gpuhost.gpu.rollout_serial(hostvars | default(none)" in rolling["serial"]


INVENTORY = """\
all:
  vars: {ansible_connection: local, ansible_python_interpreter: PYTHON}
  children:
    gpu_hosts:
      hosts:
        solo1: {}
        ga: {sglang_server_group: g}
        gb: {sglang_server_group: g}
        solo2: {}
        solo3: {}
"""


def _run(tmp_path, name, *args):
    """The plan play and the rolling play's own `serial` of playbooks/`name`, a stand-in
    change play between them (a test double: it only prints), the rolling play printing its
    batches. The file lives in playbooks/ so that group_vars/all applies as in a real run."""
    import sys

    plays = _plays(name)
    plan_play = next(p for p in plays if p.get("name") == PLAN_PLAY)
    rolling = next(p for p in plays if p.get("name") == ROLLING_PLAYS[name])
    book = [
        plan_play,
        {
            "name": "Stand-in change",
            "hosts": "gpu_hosts",
            "gather_facts": False,
            "tasks": [{"ansible.builtin.debug": {"msg": "CHANGE RAN"}}],
        },
        {
            "name": "Rolling",
            "hosts": rolling["hosts"],
            "gather_facts": False,
            "serial": rolling["serial"],
            "tasks": [
                {"ansible.builtin.debug": {"msg": "BATCH {{ ansible_play_batch | join(',') }}"},
                 "run_once": True},
            ],
        },
    ]  # fmt: skip
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(INVENTORY.replace("PYTHON", sys.executable))
    path = ROOT / "playbooks" / f".test-rollout-plan-{os.getpid()}.yml"
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    try:
        return run_playbook(["-i", inventory, path, *args], tmp_path / "facts")
    finally:
        path.unlink()


@pytest.mark.parametrize("name", sorted(ROLLING_PLAYS))
def test_ansible_templates_serial_with_hostvars_and_the_play_hosts(tmp_path, name):
    proc = _run(tmp_path, name, "-e", "rolling_update_serial=2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.findall(r"BATCH (\S+)", out) == ["solo1,ga,gb", "solo2,solo3"], out
    assert "batches: solo1 + ga + gb | solo2 + solo3" in out, out


def test_a_limit_that_splits_a_group_stops_the_run_before_any_change(tmp_path):
    proc = _run(tmp_path, "update.yml", "--limit", "solo1,ga,solo2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "serving group g: this run takes ga but not gb" in out, out
    assert "--limit ga,gb" in out
    assert "CHANGE RAN" not in out and "BATCH" not in out, out


def test_without_hostvars_the_serial_is_an_error_unless_nothing_runs(tmp_path):
    """A rolling play first in its playbook has no hostvars: an error, never plain batches;
    --syntax-check (ansible-lint runs it) templates serial with none and passes."""
    with pytest.raises(AnsibleFilterError, match="hostvars is not defined yet"):
        rollout.rollout_serial(["ga", "gb"], None, 1)
    for name in sorted(ROLLING_PLAYS):
        proc = run_playbook(["--syntax-check", ROOT / "playbooks" / name], tmp_path / "facts")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    rolling = next(p for p in _plays("update.yml") if p.get("name") == ROLLING_PLAYS["update.yml"])
    first = [{"name": "Rolling first", "hosts": "gpu_hosts", "gather_facts": False,
              "serial": rolling["serial"], "tasks": []}]  # fmt: skip
    path = ROOT / "playbooks" / f".test-rollout-first-{os.getpid()}.yml"
    path.write_text(yaml.safe_dump(first, sort_keys=False))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(INVENTORY.replace("PYTHON", "/usr/bin/python3"))
    try:
        proc = run_playbook(["-i", inventory, path], tmp_path / "facts")
    finally:
        path.unlink()
    assert proc.returncode != 0
    assert "hostvars is not defined yet" in proc.stdout + proc.stderr
