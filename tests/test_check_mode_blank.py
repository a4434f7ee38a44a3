"""Check mode on a blank host (issue 34, item 1; docs/check-mode.md).

A check run creates nothing, so a step that needs what an earlier step only "would" create
fails there: Ansible cannot become a service account that does not exist yet, and the apt
module refuses check mode without python3-apt. Held here for the whole class, read from the
YAML with `when` inherited from blocks and from the includes that pull a file in:

- every apt task and every task that becomes the service account skips where the probe
  (gpuhost.gpu.check_mode_probe, role base tasks_from check_mode) says it cannot run, or runs
  only outside check mode;
- every task file that reads gpuhost_check_mode probes first (the fact is set nowhere else);
- the probe's decision and its one finding (check_mode.unseen).

The runs on a real blank container are tests/test_check_mode_playbooks.py (every entry
playbook that applies to a lone host), molecule's `check` step (every scenario, before the
first converge) and `make demo` (`gpuhost check` on the blank sandbox).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_check_mode as cm

ROOT = Path(__file__).resolve().parents[1]
SERVICE = "{{ gpuhost_service_user }}"
BLOCK_KEYS = ("block", "rescue", "always")
APT = {"ansible.builtin.apt", "apt"}
PROBE = ("tasks_from: check_mode", "include_tasks: check_mode.yml")
# Every role that runs on a GPU host or a router is scanned (preflight, proxmox_guest and
# verify included). Not scanned: the roles that run on a Proxmox node (proxmox_host) or on
# the controller against the Proxmox API (proxmox_vm); neither touches a blank GPU host.
NOT_ON_THE_HOST = ("proxmox_host", "proxmox_vm")
OFF_IN_CHECK = "not ansible_check_mode"


def _whens(task) -> list[str]:
    w = task.get("when")
    if w is None:
        return []
    return [str(x) for x in w] if isinstance(w, list) else [str(w)]


def _included_off_in_check() -> set[str]:
    """Task files that every include of them pulls in only outside check mode."""
    seen: dict[str, list[bool]] = {}

    def walk(tasks, inherited, role):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            whens = inherited + _whens(task)
            if any(k in task for k in BLOCK_KEYS):
                for key in BLOCK_KEYS:
                    walk(task.get(key), whens, role)
                continue
            for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
                target = task.get(key)
                if isinstance(target, str):
                    off = any(OFF_IN_CHECK in w for w in whens)
                    seen.setdefault(f"roles/{role}/tasks/{target}", []).append(off)

    for path in ROOT.glob("roles/*/tasks/*.yml"):
        walk(yaml.safe_load(path.read_text()) or [], [], path.parts[-3])
    return {name for name, offs in seen.items() if all(offs)}


OFF = _included_off_in_check()


def _tasks():
    """(file, task name, module keys, become_user, inherited and own whens) of every task."""
    out = []

    def walk(tasks, whens, user, where):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            w = whens + _whens(task)
            u = task.get("become_user", user)
            if any(k in task for k in BLOCK_KEYS):
                for key in BLOCK_KEYS:
                    walk(task.get(key), w, u, where)
                continue
            out.append((where, task.get("name", "?"), set(task), u, w))

    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        if path.parts[-3] in NOT_ON_THE_HOST:
            continue
        where = str(path.relative_to(ROOT))
        walk(yaml.safe_load(path.read_text()) or [], [], None, where)
    return out


TASKS = _tasks()
APT_TASKS = [t for t in TASKS if APT & t[2]]
AS_SERVICE = [t for t in TASKS if t[3] == SERVICE]


def _guarded(where, whens, needle):
    return where in OFF or any(OFF_IN_CHECK in w or needle in w for w in whens)


def test_the_scan_finds_the_known_tasks():
    # A scan that found nothing would pass everything below.
    apt = {f"{t[0]}:{t[1]}" for t in APT_TASKS}
    assert "roles/base/tasks/install.yml:Install base packages" in apt
    assert "roles/nvidia_driver/tasks/install.yml:Install the NVIDIA driver packages" in apt
    assert len(APT_TASKS) >= 10
    users = {f"{t[0]}:{t[1]}" for t in AS_SERVICE}
    assert (
        "roles/python_env/tasks/install.yml:Wipe the FlashInfer JIT cache of another FlashInfer"
        " version" in users
    )
    assert "roles/python_env/tasks/verify.yml" in OFF
    # roles/verify: the bench's steps as the service account (playbooks/bench.yml).
    assert "roles/verify/tasks/bench.yml:Check that the venv has sglang.bench_serving" in users
    assert "roles/verify/tasks/bench.yml:Run bench_serving at each concurrency level" in users
    scanned = {t[0].split("/")[1] for t in TASKS}
    assert {"preflight", "proxmox_guest", "verify"} <= scanned


@pytest.mark.parametrize("task", APT_TASKS, ids=[f"{t[0]}:{t[1]}" for t in APT_TASKS])
def test_apt_skips_where_check_mode_cannot_run_it(task):
    where, name, _, _, whens = task
    assert _guarded(where, whens, "gpuhost_check_mode.apt"), (
        f"{where}: {name!r} runs apt in check mode even without python3-apt; add "
        "`not (ansible_check_mode and gpuhost_check_mode.apt)` to its when"
    )


@pytest.mark.parametrize("task", AS_SERVICE, ids=[f"{t[0]}:{t[1]}" for t in AS_SERVICE])
def test_steps_as_the_service_account_skip_where_it_does_not_exist_yet(task):
    where, name, _, _, whens = task
    assert _guarded(where, whens, "gpuhost_check_mode.users_missing"), (
        f"{where}: {name!r} becomes {SERVICE} in check mode, where a blank host has no such "
        "account yet; add `not (ansible_check_mode and gpuhost_service_user in "
        "gpuhost_check_mode.users_missing)` to its when"
    )


def _readers():
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        if path.name != "check_mode.yml" and "gpuhost_check_mode." in path.read_text():
            yield str(path.relative_to(ROOT))


@pytest.mark.parametrize("where", list(_readers()))
def test_a_file_that_reads_the_probe_runs_it_first(where):
    text = (ROOT / where).read_text()
    first_read = text.index("gpuhost_check_mode.")
    probes = [text.find(p) for p in PROBE if p in text]
    assert probes and min(probes) < first_read, (
        f"{where} reads gpuhost_check_mode before including base's check_mode tasks"
    )


def test_a_real_run_misses_nothing():
    spots = cm.blind_spots(False, apt_importable=False, users={"gpuhost": False})
    assert spots == {"apt": False, "users_missing": [], "unseen": []}
    assert cm.finding(spots) == []


def test_a_check_run_that_sees_everything_has_no_finding():
    spots = cm.blind_spots(True, apt_importable=True, users={"gpuhost": True})
    assert not spots["apt"] and not spots["users_missing"]
    assert cm.finding(spots) == []


def test_a_blank_host_without_python3_apt_gets_one_finding_naming_both():
    spots = cm.blind_spots(True, apt_importable=False, users={"gpuhost": False})
    assert spots["apt"] and spots["users_missing"] == ["gpuhost"]
    (f,) = cm.finding(spots)
    assert f["check"] == "check_mode.unseen" and f["status"] == "warn"
    assert "python3-apt" in f["message"] and "'gpuhost'" in f["message"]
    assert "apt-get install python3-apt" in f["fix"] and "gpuhost provision" in f["fix"]


def test_only_the_missing_account_is_named():
    spots = cm.blind_spots(True, apt_importable=True, users={"gpuhost": False, "root": True})
    (f,) = cm.finding(spots)
    assert spots["users_missing"] == ["gpuhost"] and "python3-apt" not in f["message"]
    assert "apt-get" not in f["fix"]
