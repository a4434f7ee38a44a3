"""`gpuhost update`, `gpuhost rollback` and `gpuhost check --fail-on-drift` end to end: the
real console script, ansible-runner and Ansible on local-connection hosts, with fixture
playbooks in the shape of playbooks/update.yml (the container flow is molecule/rolling_update).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhost.rollout import drift_by_host, rollout_section

GPUHOST = Path(sys.executable).parent / "gpuhost"
PLAYBOOKS = Path(__file__).parent / "fixtures" / "playbooks"
HOSTS = ["h1", "h2", "h3"]


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    path = tmp_path / "hosts.yml"
    # A router in the inventory: validation reaches it, the rollout is for gpu_hosts only.
    groups = {
        "gpu_hosts": {"hosts": dict.fromkeys(HOSTS, host)},
        "routers": {"hosts": {"r1": host}},
    }
    path.write_text(json.dumps({"all": {"children": groups}}), encoding="utf-8")
    return path


@pytest.fixture
def gpuhost(tmp_path: Path):
    runs = tmp_path / "runs"

    def run(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUHOST_")}
        env.update({"GPUHOST_RUNS_DIR": str(runs), "COLUMNS": "200"})
        proc = subprocess.run(
            [str(GPUHOST), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )
        assert "Traceback" not in proc.stdout + proc.stderr
        report = json.loads((runs / "latest" / "report.json").read_text(encoding="utf-8"))
        return proc, report

    return run


def test_update_reports_which_hosts_carry_which_config(gpuhost, inventory, tmp_path):
    proc, report = gpuhost(
        "update",
        "-i",
        str(inventory),
        "--playbook",
        str(PLAYBOOKS / "rollout.yml"),
        "-e",
        "fail_host=h2",
    )
    assert proc.returncode == 1
    rollout = report["rollout"]
    assert {h: (r["state"], r["runs"]) for h, r in rollout.items()} == {
        "h1": ("updated", "new"),
        "h2": ("rolled_back", "old"),
        "h3": ("not_reached", "old"),
    }
    assert rollout["h1"]["config"] == "bbbbbbbbbbbb"
    assert rollout["h2"]["config"] == rollout["h2"]["previous"] == "aaaaaaaaaaaa"
    assert "not_reached" in proc.stdout and "rolled_back" in proc.stdout


def test_update_passes_serial_and_max_fail_percentage(gpuhost, inventory):
    # Three hosts in one batch and a 50% allowance: h2 fails, h1 and h3 still update.
    proc, report = gpuhost(
        "update",
        "-i",
        str(inventory),
        "--playbook",
        str(PLAYBOOKS / "rollout.yml"),
        "-e",
        "fail_host=h2",
        "--serial",
        "3",
        "--max-fail-percentage",
        "50",
    )
    assert report["extra_vars"]["rolling_update_serial"] == "3"
    assert report["extra_vars"]["rolling_update_max_fail_percentage"] == 50
    assert {h: r["state"] for h, r in report["rollout"].items()} == {
        "h1": "updated",
        "h2": "rolled_back",
        "h3": "updated",
    }
    assert proc.returncode == 1


def test_update_success_exits_0(gpuhost, inventory):
    proc, report = gpuhost(
        "update", "-i", str(inventory), "--playbook", str(PLAYBOOKS / "rollout.yml")
    )
    assert proc.returncode == 0, proc.stdout
    assert {r["state"] for r in report["rollout"].values()} == {"updated"}


@pytest.mark.parametrize("value", ["0", "x", "101%", "-1"])
def test_bad_serial_is_a_usage_error(inventory, value):
    proc = subprocess.run(
        [str(GPUHOST), "update", "-i", str(inventory), "--serial", value],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "--serial" in proc.stderr


def test_fail_on_drift_exits_1_and_names_the_host(gpuhost, inventory, tmp_path):
    args = [
        "check",
        "-i",
        str(inventory),
        "--playbook",
        str(PLAYBOOKS / "changes.yml"),
        "-e",
        f"gpuhost_test_dir={tmp_path}",
        "--limit",
        "h1",
    ]
    proc, report = gpuhost(*args)
    assert proc.returncode == 0  # drift alone fails only with --fail-on-drift
    assert [d["task"] for d in report["drift"]["h1"]] == ["Write the marker file"]
    proc, report = gpuhost(*args, "--fail-on-drift")
    assert proc.returncode == 1
    assert "DRIFT" in proc.stdout and "h1" in report["error"]
    assert "+gpuhost test marker" in report["drift"]["h1"][0]["diff"]
    assert not (tmp_path / "h1.marker").exists(), "check mode must change nothing"


def test_no_drift_passes_with_fail_on_drift(gpuhost, inventory):
    proc, report = gpuhost(
        "check",
        "-i",
        str(inventory),
        "--playbook",
        str(PLAYBOOKS / "nochange.yml"),
        "--fail-on-drift",
    )
    assert proc.returncode == 0, proc.stdout
    assert report["drift"] == {h: [] for h in [*HOSTS, "r1"]}


def test_rollout_section_and_drift_are_pure():
    report = {
        "hosts": {"a": {}, "b": {}},
        "check": True,
        "changed_tasks": [{"host": "b", "task": "t", "diff": None}],
    }
    section = rollout_section({"a": {"state": "unchanged", "config": "c"}}, ["a", "b"])
    assert section["b"] == {"state": "not_reached", "runs": "old"}
    assert set(section) == {"a", "b"}
    assert drift_by_host(report) == {"a": [], "b": [{"task": "t", "diff": None}]}
