"""`gpuhost update` with a serving group (issue 30): the real console script, ansible-runner and
Ansible on local-connection hosts, with a playbook made of playbooks/update.yml's own plan play
and a rollout stand-in (a test double in the shape of tests/fixtures/playbooks/rollout.yml)
whose `serial` is update.yml's. A group is one unit: listed together in the Rollout section
(each row names its group), refused whole when --limit takes part of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from gpuhost_fakes import ROOT

from gpuhost import inventory as inv
from gpuhost import report as report_md
from gpuhost.rollout import rollout_section

GPUHOST = Path(sys.executable).parent / "gpuhost"
PLAN_PLAY = "Plan the batches (a serving group is one unit)"
ROLLING = "Rolling update of the SGLang workers"
GROUP = {
    "sglang_server_node_rank": -1,
    "sglang_server_dist_init_port": 20000,
    "sglang_server_group_address": "{{ inventory_hostname }}",
}


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {
        "solo": {},
        "gb": {"sglang_server_group": "g"},
        "ga": {"sglang_server_group": "g"},
        "zed": {},
    }
    groups = {"gpu_hosts": {"hosts": hosts}}
    path = tmp_path / "hosts.yml"
    path.write_text(
        json.dumps({"all": {"vars": {**host, **GROUP}, "children": groups}}), encoding="utf-8"
    )
    return path


@pytest.fixture
def playbook(tmp_path: Path) -> Path:
    plays = yaml.safe_load((ROOT / "playbooks" / "update.yml").read_text())
    plan = next(p for p in plays if p.get("name") == PLAN_PLAY)
    rolling = next(p for p in plays if p.get("name") == ROLLING)
    stand_in = {
        "name": "Roll out (stand-in)",
        "hosts": "gpu_hosts",
        "gather_facts": False,
        "serial": rolling["serial"],
        "tasks": [
            {
                "name": "Record the rollout state of this host",
                "ansible.builtin.set_fact": {
                    "gpuhost_rollout": {"state": "updated", "config": "b" * 12,
                                        "previous": "a" * 12, "known_good": "a" * 12},
                },
            }
        ],
    }  # fmt: skip
    path = tmp_path / "update.yml"
    path.write_text(yaml.safe_dump([plan, stand_in], sort_keys=False), encoding="utf-8")
    return path


def gpuhost(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUHOST_")}
    env.update({"GPUHOST_RUNS_DIR": str(runs), "COLUMNS": "200"})
    proc = subprocess.run(
        [str(GPUHOST), *args], capture_output=True, text=True, env=env, timeout=180, check=False
    )
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc, json.loads((runs / "latest" / "report.json").read_text(encoding="utf-8"))


def test_a_group_is_listed_together_each_row_naming_it(tmp_path, inventory, playbook):
    proc, report = gpuhost(tmp_path, "update", "-i", str(inventory), "--playbook", str(playbook))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    section = report["rollout"]
    assert list(section) == ["ga", "gb", "solo", "zed"]
    assert [section[h].get("group") for h in section] == ["g", "g", None, None]
    assert {row["state"] for row in section.values()} == {"updated"}
    row = next(line for line in proc.stdout.splitlines() if line.strip().startswith("gb "))
    assert row.split()[:3] == ["gb", "g", "updated"], proc.stdout


def test_a_limit_that_splits_a_group_fails_before_the_rollout(tmp_path, inventory, playbook):
    proc, report = gpuhost(
        tmp_path, "update", "-i", str(inventory), "--playbook", str(playbook), "-l", "solo,ga"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (failed,) = report["failed_tasks"]
    assert failed["task"] == "Refuse a run that would split a serving group"
    out = proc.stdout + proc.stderr
    assert "serving group g: this run takes ga but not gb" in out
    assert "--limit gb,ga" in out or "--limit ga,gb" in out
    assert {h: r["state"] for h, r in report["rollout"].items()} == {
        "ga": "not_reached",
        "solo": "not_reached",
    }


def test_serving_groups_reads_the_inventory_leaving_out_hosts_alone(inventory):
    assert inv.serving_groups([inventory], ["solo", "ga", "gb", "nowhere"]) == {
        "ga": "g",
        "gb": "g",
    }


def test_rollout_section_puts_a_group_where_its_first_host_is():
    groups = {"b2": "g", "z1": "g"}
    section = rollout_section({}, ["a", "z1", "c", "b2"], groups=groups)
    assert list(section) == ["a", "b2", "z1", "c"]
    assert section["z1"] == {"state": "not_reached", "runs": "old", "group": "g"}
    assert "group" not in section["a"]


def test_report_md_names_the_group_of_a_host():
    report = {"rollout": rollout_section({}, ["a", "b"], groups={"a": "g"})}
    text = "\n".join(report_md._section_run(report))
    assert "| a (group g) | not_reached |" in text
    assert "| b | not_reached |" in text
