"""Root never runs a file the server could have written (issue 15, item 2).

- Every task of the collection that runs the server's venv's Python (the bench, the NCCL
  sweep and torch version read, python_env's verification) runs it as the service account:
  read from the YAML, with become/become_user inherited from blocks and plays.
- Every venv the collection installs is root's, with uv's cache root's too (uv hard-links
  the venv's files from it), and python_env refuses a venv or cache inside a directory the
  server can write.
- The probe does not run the venv's Python as root when the venv is not root's alone, and a
  venv the service account owned (earlier releases) is rebuilt from empty.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_python_env as pe

ROOT = Path(__file__).resolve().parents[1]
SERVICE = "{{ gpuhost_service_user }}"
# How a task names the server's venv's interpreter (the roles' variables and its path).
VENV_PYTHON = (
    "verify_bench_python",
    "nccl_verify_python",
    "_python_env_venv_python",
    "python_env_venv_dir",
    "gpuhost_python_env.python",
    "/venv/bin/",
)
# Modules that run a program given to them.
RUNNERS = {
    "ansible.builtin.command",
    "ansible.builtin.shell",
    "ansible.builtin.script",
    "ansible.builtin.raw",
    "command",
    "shell",
    "script",
    "raw",
    "gpuhost.gpu.sglang_bench",
    "gpuhost.gpu.nccl_torch",
}
BLOCK_KEYS = ("block", "rescue", "always")
PLAY_KEYS = ("pre_tasks", "tasks", "post_tasks", "handlers")
AUTOTUNE = "roles/nccl/tasks/autotune.yml:Measure the derived env against the candidates"


def _walk(tasks, become, user, where, out):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        b = task.get("become", become)
        u = task.get("become_user", user)
        if any(k in task for k in BLOCK_KEYS):
            for key in BLOCK_KEYS:
                _walk(task.get(key), b, u, where, out)
            continue
        for module in RUNNERS & task.keys():
            text = yaml.safe_dump({"args": task[module], "vars": task.get("vars")})
            if any(marker in text for marker in VENV_PYTHON):
                out.append((f"{where}:{task.get('name', '?')}", b, u))


def _venv_python_tasks():
    found = []
    for path in sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/*.yml")]):
        doc = yaml.safe_load(path.read_text()) or []
        where = str(path.relative_to(ROOT))
        if path.parts[-2] == "playbooks":
            for play in doc:
                if isinstance(play, dict):
                    for key in PLAY_KEYS:
                        _walk(
                            play.get(key),
                            play.get("become"),
                            play.get("become_user"),
                            where,
                            found,
                        )
        else:
            _walk(doc, None, None, where, found)
    return found


TASKS = _venv_python_tasks()


def test_the_scan_finds_the_known_runs_of_the_venv():
    # A scan that found nothing would pass everything below.
    names = {name for name, _, _ in TASKS}
    for expected in (
        "roles/verify/tasks/bench.yml:Check that the venv has sglang.bench_serving",
        "roles/verify/tasks/bench.yml:Run bench_serving at each concurrency level",
        "roles/nccl/tasks/sweep.yml:Run the all-reduce sweep with the NCCL settings",
        "roles/nccl/tasks/preflight.yml:"
        "Read the NCCL version torch ships and compare the role's files",
        "roles/python_env/tasks/verify.yml:"
        "Import sglang, flashinfer and torch and report their versions",
        "roles/python_env/tasks/verify.yml:"
        "Check that the server's argument parser loads (launch_server --help)",
        AUTOTUNE,
    ):
        assert expected in names


@pytest.mark.parametrize(("name", "become", "user"), TASKS, ids=[t[0] for t in TASKS])
def test_venv_python_runs_as_the_service_account(name, become, user):
    assert become is True and user == SERVICE, (
        f"{name} runs the server's venv's Python as {user or 'root'} (become: {become}); "
        f"set become: true and become_user: '{SERVICE}'"
    )


def _venv_includes():
    """Every `tasks_from: venv` of role python_env, and python_env's own include of venv.yml."""
    out = []
    for path in ROOT.glob("roles/*/tasks/*.yml"):
        text = path.read_text()
        if "tasks_from: venv" not in text and "include_tasks: venv.yml" not in text:
            continue

        def walk(tasks, path=path):
            for task in tasks or []:
                if not isinstance(task, dict):
                    continue
                for key in BLOCK_KEYS:
                    walk(task.get(key))
                role = task.get("ansible.builtin.include_role") or {}
                inc = task.get("ansible.builtin.include_tasks")
                if role.get("tasks_from") == "venv" or inc == "venv.yml":
                    out.append((str(path.relative_to(ROOT)), task.get("vars") or {}))

        walk(yaml.safe_load(text))
    return out


def test_every_venv_of_the_collection_is_roots_with_a_root_cache():
    includes = _venv_includes()
    assert {p for p, _ in includes} >= {
        "roles/python_env/tasks/install.yml",
        "roles/sglang_router/tasks/install.yml",
        "roles/model_cache/tasks/start_download.yml",
    }
    for path, args in includes:
        assert args["python_env_venv_owner"] == "root", path
        assert args["python_env_venv_group"] == "root", path


def test_python_env_defaults_keep_uv_cache_and_venv_out_of_the_servers_dirs():
    defaults = yaml.safe_load((ROOT / "roles/python_env/defaults/main.yml").read_text())
    # python_env_venv_dir is shared (sglang_server resolves it): group_vars/all.
    defaults.update(yaml.safe_load((ROOT / "group_vars/all/python_env.yml").read_text()))
    for name in ("python_env_uv_cache_dir", "python_env_venv_dir", "python_env_venvs_dir"):
        assert "gpuhost_cache_dir" not in defaults[name], name
        assert "gpuhost_state_dir" not in defaults[name], name
    configure = (ROOT / "roles/python_env/vars/main.yml").read_text()
    dirs = yaml.safe_load(configure)["_python_env_dirs"]
    # The service account owns the JIT caches only.
    assert "uv_cache" not in dirs


@pytest.mark.parametrize(
    ("paths", "problems"),
    [
        (
            {"python_env_uv_cache_dir": "/var/cache/gpuhost/uv"},
            ["python_env_uv_cache_dir: /var/cache/gpuhost/uv is inside /var/cache/gpuhost"],
        ),
        (
            {"python_env_venv_dir": "/var/lib/gpuhost/./venv/"},
            ["python_env_venv_dir: /var/lib/gpuhost/./venv/ is inside /var/lib/gpuhost"],
        ),
        (
            {"python_env_venv_dir": "/var/cache/gpuhost"},
            ["python_env_venv_dir: /var/cache/gpuhost is inside /var/cache/gpuhost"],
        ),
        ({"python_env_uv_cache_dir": "/var/cache/gpuhost-uv"}, []),
        ({"python_env_uv_cache_dir": "/opt/gpuhost/uv-cache"}, []),
    ],
)
def test_paths_inside_the_servers_writable_dirs_are_named(paths, problems):
    assert pe.paths_inside(paths, ["/var/cache/gpuhost", "/var/lib/gpuhost/"]) == problems


GOOD = {"venv_exists": True, "venv_python_version": "3.11.2", "python_version": "3.11.2"}


def test_a_venv_not_roots_is_rebuilt_from_empty():
    probe = {**GOOD, "venv_not_root": "/opt/gpuhost/venv is owned by gpuhost"}
    reason = pe.sync_reason({"lock_sha256": "a" * 64}, "a" * 64, probe)
    assert reason == "venv not root's (/opt/gpuhost/venv is owned by gpuhost)"
    assert pe.venv_needs_clear(probe)
    clean = {**GOOD, "venv_not_root": ""}
    assert pe.sync_reason({"lock_sha256": "a" * 64}, "a" * 64, clean) is None


def _probe_module():
    from ansible_collections.gpuhost.gpu.plugins.modules import python_env_probe

    return python_env_probe


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_probe_names_what_makes_a_venv_not_roots(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for p in (venv, venv / "bin", venv / "pyvenv.cfg"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    probe = _probe_module()
    assert probe._venv_not_root(str(venv)) == ""
    (venv / "bin").chmod(0o775)
    assert probe._venv_not_root(str(venv)) == f"{venv}/bin is writable by group or others (0775)"
    (venv / "bin").chmod(0o755)
    nobody = pwd.getpwnam("nobody")
    os.lchown(venv / "bin" / "python", nobody.pw_uid, nobody.pw_gid)
    assert probe._venv_not_root(str(venv)) == f"{venv}/bin/python is owned by nobody"
    os.lchown(venv / "bin" / "python", 0, 0)
    os.chown(venv, nobody.pw_uid, nobody.pw_gid)
    assert probe._venv_not_root(str(venv)) == f"{venv} is owned by nobody"
