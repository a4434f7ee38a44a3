"""Issue 28 item 6: an interrupted `gpuhost update` (stopped between the gate and the re-add)
must not strand the worker out of the routers. The drained mark is written on the host (root's,
in gpuhost_state_dir) before the drain, read at the start of every update and rollback (and by
provisioning's serve play), and removed only after the re-add succeeded on every router."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from gpuhost_fakes import ROOT

TASKS = ROOT / "roles/rolling_update/tasks"


def _load(name):
    return yaml.safe_load((TASKS / name).read_text())


def _at(tasks, fragment):
    return next(i for i, t in enumerate(tasks) if fragment in t["name"])


def _main():
    tasks = _load("main.yml")
    return tasks, next(t for t in tasks if t.get("name") == "Update this host")


def test_the_mark_path_is_one_decision_in_the_root_only_state_dir():
    rolevars = yaml.safe_load((ROOT / "roles/rolling_update/vars/main.yml").read_text())
    assert rolevars["_rolling_update_drained_mark"] == (
        "{{ gpuhost_state_dir }}/rolling_update/drained"
    )
    # Nothing else spells the path out.
    hits = subprocess.run(
        ["grep", "-rln", "--include=*.yml", "--include=*.py", "rolling_update/drained",
         "roles", "playbooks", "plugins"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    assert hits == ["roles/rolling_update/vars/main.yml"], hits


def test_update_writes_the_mark_before_the_drain():
    _, update = _main()
    block = update["block"]
    mark = block[_at(block, "Mark the worker drained on the host, before the drain")]
    assert mark["ansible.builtin.include_tasks"] == "mark_drained.yml"
    assert _at(block, "Note that the worker leaves rotation") < _at(block, "Mark the worker")
    assert _at(block, "Mark the worker") < _at(block, "Drain this worker from the routers")
    written = _load("mark_drained.yml")[-2]["ansible.builtin.copy"]
    assert written["dest"] == "{{ _rolling_update_drained_mark }}"
    assert (written["owner"], written["group"], written["mode"]) == ("root", "root", "0600")


def test_an_unchanged_rerun_reads_the_mark_and_puts_the_worker_back():
    tasks, update = _main()
    # Read before the block; a marked worker counts as drained even when nothing changes.
    assert _at(tasks, "Read the drained mark") < _at(tasks, "Update this host")
    before = tasks[_at(tasks, "Remember the config before the update")]["ansible.builtin.set_fact"]
    assert "gpuhost_rolling_update.drained" in before["_rolling_update_drained"]
    # The "leaves rotation" note keeps a mark already there (an unchanged host sets nothing).
    note = update["block"][_at(update["block"], "Note that the worker leaves rotation")]
    assert (
        note["ansible.builtin.set_fact"]["_rolling_update_drained"]
        .strip()
        .startswith("{{ _rolling_update_drained\n")
    )
    rejoin = update["always"][_at(update["always"], "Put the worker back into rotation")]
    assert rejoin["ansible.builtin.include_tasks"] == "rejoin.yml"
    assert "_rolling_update_drained | bool" in rejoin["when"]


def test_rejoin_gates_then_re_adds_then_removes_the_mark():
    tasks = _load("rejoin.yml")
    # The mark as it is now (lstat), read first unless this run read it already; one include
    # when drained or marked.
    assert tasks[0]["gpuhost.gpu.path_stats"]["paths"] == ["{{ _rolling_update_drained_mark }}"]
    assert tasks[0]["register"] == "_rolling_update_rejoin_mark"
    assert tasks[0]["when"] == "gpuhost_rolling_update.drained is not defined"
    include = tasks[_at(tasks, "Put the worker back into rotation")]
    assert include["ansible.builtin.include_tasks"] == "rejoin_back.yml"
    assert "_rolling_update_marked | bool" in include["when"]
    assert "_rolling_update_drained" in include["when"]
    rv = yaml.safe_load((ROOT / "roles/rolling_update/vars/main.yml").read_text())
    env = jinja2.Environment()
    # A test double of Ansible's `skipped` test: a registered result of a skipped task.
    env.tests["skipped"] = lambda result: bool(result.get("skipped"))
    marked = env.compile_expression(
        rv["_rolling_update_marked"].strip().removeprefix("{{").removesuffix("}}")
    )
    looked = {"results": [{"stat": {"exists": True}}]}
    assert marked(_rolling_update_rejoin_mark=looked, gpuhost_rolling_update={"drained": False})
    skipped = {"skipped": True}
    for drained in (True, False):
        got = marked(
            _rolling_update_rejoin_mark=skipped, gpuhost_rolling_update={"drained": drained}
        )
        assert got is drained
    back = _load("rejoin_back.yml")
    block_task = back[_at(back, "Put the worker back into rotation")]
    assert block_task["when"] == "not ansible_check_mode"
    block = block_task["block"]
    gate, add, remove = (
        _at(block, "healthy"), _at(block, "Add the worker to every router"),
        _at(block, "Remove the drained mark"),
    )  # fmt: skip
    assert gate < add < remove
    assert block[gate]["ansible.builtin.include_role"] == {
        "name": "sglang_server",
        "tasks_from": "gate",
    }
    assert block[add]["ansible.builtin.include_role"]["tasks_from"] == "add_back"
    assert block[remove]["ansible.builtin.file"] == {
        "path": "{{ _rolling_update_drained_mark }}", "state": "absent",
    }  # fmt: skip
    # This run's read of the mark says it is gone once it is (a later rejoin reads that).
    noted = block[_at(block, "Note that the worker is back")]["ansible.builtin.set_fact"]
    assert remove < _at(block, "Note that the worker is back")
    assert noted["gpuhost_rolling_update"]["drained"] is False
    # add_back fails unless every router answered and has the worker healthy, so a task after
    # it runs only once the re-add succeeded everywhere.
    add_back = (ROOT / "roles/sglang_router/tasks/add_back.yml").read_text()
    assert (
        "answered.yml" in add_back and "router_worker_ids(sglang_router_worker, true)" in add_back
    )


def test_rollback_marks_before_its_drain_and_rejoins_with_nothing_to_roll_back():
    tasks = _load("rollback.yml")
    assert _at(tasks, "Read the drained mark") < _at(tasks, "Roll back this host")
    block = tasks[_at(tasks, "Roll back this host")]["block"]
    assert _at(block, "Mark the worker drained") < _at(block, "Drain this worker")
    adds = [t for t in block + tasks[_at(tasks, "Roll back this host")]["rescue"]
            if "back into rotation" in t["name"]]  # fmt: skip
    assert adds and all(t["ansible.builtin.include_tasks"] == "rejoin.yml" for t in adds)
    last = tasks[-1]
    assert last["ansible.builtin.include_tasks"] == "rejoin.yml"
    assert last["when"] == "_rolling_update_before.previous == _rolling_update_before.live"


def _run(argv, **kw):
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    ansible = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run(
        [str(ansible), *argv], capture_output=True, text=True, env=env, cwd=ROOT,
        check=False, timeout=300, **kw,
    )  # fmt: skip


def test_provision_puts_a_marked_worker_back(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu_hosts:\n      hosts:\n        h1:\n")
    out = _run(["-i", str(inventory), str(ROOT / "site.yml"), "--list-tasks", "--tags", "server"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Put back a worker an interrupted update left drained (rolling_update)" in out.stdout
    serve = yaml.safe_load((ROOT / "playbooks/serve.yml").read_text())[-1]
    rejoin = serve["post_tasks"][-1]["ansible.builtin.include_role"]
    assert (rejoin["name"], rejoin["tasks_from"]) == ("rolling_update", "rejoin")


@pytest.mark.skipif(os.geteuid() != 0, reason="writes a root-owned mark")
def test_the_mark_is_written_root_only_and_read_back(tmp_path):
    """A local play: mark_drained.yml writes the mark, drained_mark.yml publishes it."""
    state, result = tmp_path / "state", tmp_path / "result.json"
    play = tmp_path / "play.yml"
    play.write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    gpuhost_state_dir: {state}
    ansible_python_interpreter: {sys.executable}
    rolling_update_router_group: routers
  tasks:
    - name: Read, no mark yet
      ansible.builtin.include_role: {{name: gpuhost.gpu.rolling_update, tasks_from: drained_mark}}
    - name: Keep it
      ansible.builtin.set_fact: {{before: "{{{{ gpuhost_rolling_update.drained }}}}"}}
    - name: Write the mark
      ansible.builtin.include_role: {{name: gpuhost.gpu.rolling_update, tasks_from: mark_drained}}
    - name: Keep what this run's read says now, without a read
      ansible.builtin.set_fact: {{written: "{{{{ gpuhost_rolling_update.drained }}}}"}}
    - name: Read it
      ansible.builtin.include_role: {{name: gpuhost.gpu.rolling_update, tasks_from: drained_mark}}
    - name: Say
      ansible.builtin.copy:
        dest: {result}
        mode: "0600"
        content: "{{{{ {{'before': before, 'written': written,
                        'after': gpuhost_rolling_update.drained}} | to_json }}}}"
""")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      sglang_server_port: 30000\n")
    out = _run(["-i", str(inventory), str(play)])
    assert out.returncode == 0, out.stdout[-3000:]
    assert json.loads(result.read_text()) == {"before": False, "written": True, "after": True}
    mark = state / "rolling_update" / "drained"
    st, dst = mark.stat(), mark.parent.stat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (0, "0o600")
    assert (dst.st_uid, oct(dst.st_mode & 0o777)) == (0, "0o700")
