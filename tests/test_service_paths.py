"""Root acts below the service account's directories only through gpuhost.gpu.service_path
(issue 28 item 1).

The account owns and writes gpuhost_cache_dir and gpuhost_service_state_dir (role base's
_base_service_dirs, the one list). Whatever it put there (a symbolic link to
/etc/systemd/system, a FIFO, a hard link) ansible.builtin.file, copy, template, lineinfile
... follow, so a root task with one of them on such a path would chown or write the target.

This scan holds the class: every task in roles/*/tasks, roles/*/handlers and playbooks that
runs as root (no become_user of the service account, inherited from blocks and plays) and
names, in a path argument, a variable that derives from one of those directories (read from
roles/*/defaults, roles/*/vars, group_vars/all and set_fact, transitively) fails, unless its
module is service_path or one of the read-only modules below that never follow a link.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SERVICE = "{{ gpuhost_service_user }}"
BLOCK_KEYS = ("block", "rescue", "always")
PLAY_KEYS = ("pre_tasks", "tasks", "post_tasks", "handlers")
# Modules that write, read, run or follow what a path names.
TOUCHING = {
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.")
    for name in (
        "file",
        "copy",
        "template",
        "lineinfile",
        "blockinfile",
        "replace",
        "unarchive",
        "get_url",
        "assemble",
        "fetch",
        "slurp",
        "find",
        "command",
        "shell",
        "script",
        "raw",
        "stat",
    )
}
# This collection's modules that take a path below those directories, and why they may.
SAFE = {
    "gpuhost.gpu.service_path": "walks with O_NOFOLLOW, refuses what the account planted",
    "gpuhost.gpu.file_set": "service_path's walk for each entry (one call for a role's paths)",
    "gpuhost.gpu.path_stats": "read-only; lstat of each path (a link is reported, not followed)",
    "gpuhost.gpu.python_env_probe": "read-only; lstat of each dir (a link is wrong)",
    "gpuhost.gpu.path_size": "read-only sizes; no link followed but a snapshot's to its blob "
    "(stat, no read), a ref read only when a regular file",
    "gpuhost.gpu.download_wait": "read-only: path_size's sizes",
    "gpuhost.gpu.model_cache_state": "read-only: path_size's sizes, an lstat of the marker, and "
    "file_set's own check mode (service_path's walk, nothing written)",
    "gpuhost.gpu.doctor": "read-only: statvfs of the cache dir",
    "gpuhost.gpu.hf_cache_adopt": "the destination through service_path's opened_directory walk, "
    "each entry by its directory's descriptor (O_NOFOLLOW, O_EXCL temp names, rename in place)",
}
# Root tasks that name such a path without acting on it, and why.
EXEMPT = {
    "roles/model_cache/tasks/start_download.yml: Start the download in the background": (
        "systemd-run starts the download unit as the account (its uid and gid); HF_HOME is "
        "that unit's environment and working place, root opens nothing there"
    ),
}
# Arguments of a module that name a path (command/shell: all of them).
PATH_ARGS = ("path", "dest", "src", "paths", "file", "chdir", "creates", "removes", "cache_dir")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def service_roots() -> set[str]:
    doc = yaml.safe_load((ROOT / "roles/base/vars/main.yml").read_text())
    roots = {n for item in doc["_base_service_dirs"] for n in re.findall(r"{{\s*(\w+)\s*}}", item)}
    assert roots == {"gpuhost_cache_dir", "gpuhost_service_state_dir"}, roots
    return roots


def _definitions() -> dict[str, str]:
    """Every variable the roles and group_vars define, with its text."""
    defs: dict[str, str] = {}
    files = [
        *ROOT.glob("roles/*/defaults/main.yml"),
        *ROOT.glob("roles/*/vars/main.yml"),
        *ROOT.glob("group_vars/all/*.yml"),
    ]
    for path in files:
        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
            defs[key] = defs.get(key, "") + " " + yaml.safe_dump(value)
    for path in ROOT.glob("roles/*/tasks/*.yml"):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            facts = task.get("ansible.builtin.set_fact") or task.get("set_fact")
            if isinstance(facts, dict):
                for key, value in facts.items():
                    defs[key] = defs.get(key, "") + " " + yaml.safe_dump(value)
    return defs


def tainted(roots: set[str], defs: dict[str, str]) -> set[str]:
    """The roots and every variable whose definition names one, transitively."""
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for key, text in defs.items():
            if key not in found and found & set(_NAME.findall(text)):
                found.add(key)
                grew = True
    return found


def _tasks(tasks, user=None):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        u = task.get("become_user", user)
        if any(k in task for k in BLOCK_KEYS):
            for key in BLOCK_KEYS:
                yield from _tasks(task.get(key), u)
            continue
        yield {**task, "_user": u}


def _module(task) -> tuple[str, object]:
    for key, value in task.items():
        if "." in key or key in TOUCHING:
            if key.startswith("ansible.builtin.") and key not in TOUCHING:
                continue
            return key, value
    return "", None


def offenders(tasks, names: set[str], where: str) -> list[str]:
    """Root tasks that touch a path derived from names with a module not in SAFE."""
    out = []
    for task in _tasks(tasks):
        if task["_user"] == SERVICE:
            continue
        module, args = _module(task)
        if not module or module in SAFE:
            continue
        if module.endswith("stat") and not (isinstance(args, dict) and args.get("follow")):
            continue  # lstat: read-only, follows nothing
        if module.endswith(("command", "shell", "script", "raw")) or not isinstance(args, dict):
            text = yaml.safe_dump(args)
        else:
            text = yaml.safe_dump({k: v for k, v in args.items() if k in PATH_ARGS})
        used = set(_NAME.findall(text))
        if "item" in used:
            used |= set(_NAME.findall(yaml.safe_dump(task.get("loop", task.get("with_items")))))
        hit = sorted(used & names)
        if hit:
            out.append(f"{where}: {task.get('name', '?')} ({module} on {', '.join(hit)})")
    return out


def _all_files():
    for path in sorted(
        [
            *ROOT.glob("roles/*/tasks/*.yml"),
            *ROOT.glob("roles/*/handlers/*.yml"),
            *ROOT.glob("playbooks/*.yml"),
        ]
    ):
        doc = yaml.safe_load(path.read_text()) or []
        where = str(path.relative_to(ROOT))
        if path.parts[-2] == "playbooks":
            for play in doc:
                if isinstance(play, dict):
                    for key in PLAY_KEYS:
                        yield where, [{"block": play.get(key) or [], **_user(play)}]
        else:
            yield where, doc


def _user(play):
    return {"become_user": play["become_user"]} if "become_user" in play else {}


NAMES = tainted(service_roots(), _definitions())


def test_the_names_below_the_service_directories_are_found():
    # A scan that knew no names would pass everything below.
    for name in (
        "model_cache_hf_home",
        "_model_cache_marker",
        "_model_cache_repo_dir",
        "python_env_compile_cache_dir",
        "_python_env_dirs",
        "_sglang_server_cache_env",
        "_base_service_dirs",
    ):
        assert name in NAMES
    assert "gpuhost_state_dir" not in NAMES
    assert "gpuhost_config_dir" not in NAMES


def test_no_root_task_acts_below_the_service_directories_but_through_service_path():
    every = [o for where, tasks in _all_files() for o in offenders(tasks, NAMES, where)]
    found = [o for o in every if o.split(" (")[0] not in EXEMPT]
    # An exemption whose task is gone (renamed, changed) is stale: it must go too.
    assert {o.split(" (")[0] for o in every} >= EXEMPT.keys(), "stale EXEMPT entry"
    assert not found, (
        "root tasks on a path the service account can write (it could put a link there "
        "to /etc/systemd/system): use gpuhost.gpu.service_path, or run it as the account:\n"
        + "\n".join(found)
    )


def test_the_roles_use_service_path_where_root_makes_the_accounts_paths():
    uses = {
        (where, task.get("name"))
        for where, tasks in _all_files()
        for task in _tasks(tasks)
        if "gpuhost.gpu.service_path" in task or "gpuhost.gpu.file_set" in task
    }
    for expected in (
        (
            "roles/base/tasks/configure.yml",
            "Create the gpuhost directories and the service account's directories",
        ),
        ("roles/python_env/tasks/configure.yml", "Create the JIT caches for the service account"),
        (
            "roles/model_cache/tasks/start.yml",
            "Remove a hub token file an interrupted earlier run left, create HF_HOME and the"
            " marker directory",
        ),
        ("roles/model_cache/tasks/finish.yml", "Write the completion marker"),
    ):
        assert expected in uses


@pytest.mark.parametrize(
    ("task", "flagged"),
    [
        ({"ansible.builtin.file": {"path": "{{ gpuhost_cache_dir }}/x", "state": "directory"}}, 1),
        ({"ansible.builtin.copy": {"dest": "{{ _model_cache_marker }}", "content": "x"}}, 1),
        ({"ansible.builtin.file": {"path": "{{ item }}"}, "loop": "{{ _python_env_dirs }}"}, 1),
        ({"ansible.builtin.command": {"argv": ["chown", "x", "{{ model_cache_hf_home }}"]}}, 1),
        ({"ansible.builtin.stat": {"path": "{{ model_cache_hf_home }}", "follow": True}}, 1),
        ({"block": [{"ansible.builtin.file": {"path": "{{ gpuhost_service_state_dir }}"}}]}, 1),
        ({"gpuhost.gpu.some_new_module": {"path": "{{ gpuhost_cache_dir }}"}}, 1),
        ({"ansible.builtin.stat": {"path": "{{ model_cache_hf_home }}"}}, 0),
        ({"ansible.builtin.file": {"path": "{{ gpuhost_state_dir }}/x"}}, 0),
        (
            {
                "ansible.builtin.file": {"path": "{{ gpuhost_cache_dir }}/uv", "state": "absent"},
                "become_user": SERVICE,
            },
            0,
        ),
        ({"become_user": SERVICE, "block": [{"file": {"path": "{{ gpuhost_cache_dir }}"}}]}, 0),
        ({"gpuhost.gpu.service_path": {"path": "{{ gpuhost_cache_dir }}/x"}}, 0),
        ({"ansible.builtin.copy": {"dest": "/etc/x", "content": "{{ model_cache_hf_home }}"}}, 0),
    ],
)
def test_the_scan_flags_a_new_root_task_on_such_a_path(task, flagged):
    assert len(offenders([task], NAMES, "t.yml")) == flagged
