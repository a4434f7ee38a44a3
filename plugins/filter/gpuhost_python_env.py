"""Filters over the python_env role's decisions (plugins/module_utils/gpuhost_python_env.py).

paths | gpuhost.gpu.lock_select(lane, override)   -> the lock file to install
text | gpuhost.gpu.lock_info(name)                -> {pins, python, versions, sha256, name}
pins | gpuhost.gpu.pins_missing(installed)         -> the name==version pins a venv lacks
probe | gpuhost.gpu.python_env_sync_reason(marker, sha256, choice) -> why to re-sync, or ""
probe | gpuhost.gpu.python_env_venv_needs_clear(choice) -> rebuild the venv from empty
marker | gpuhost.gpu.flashinfer_cache_stale(versions) -> wipe FlashInfer's JIT cache
root | gpuhost.gpu.python_env_cache_env           -> {FLASHINFER_WORKSPACE_BASE: ..., ...}
paths | gpuhost.gpu.python_env_paths_inside(dirs)  -> ["<var>: <path> is inside <dir>", ...]
stdout | gpuhost.gpu.python_env_smoke             -> the smoke test's versions
expected | gpuhost.gpu.version_mismatches(installed) -> ["torch: lock 2.9.1, installed ..."]
text | gpuhost.gpu.parse_check_env                -> sglang.check_env's "Key: value" lines
probe | gpuhost.gpu.python_env_choice(source, python, lock, install_dir) -> the venv's interpreter
uv | gpuhost.gpu.python_install_command(version, install_dir, mirror) -> {argv, env}
uv | gpuhost.gpu.python_find_command(version, install_dir) -> {argv, env}
stderr | gpuhost.gpu.python_install_error(version, install_dir, mirror) -> the message
sha256 | gpuhost.gpu.python_env_venv_name         -> the lock's venv directory name
probe | gpuhost.gpu.python_env_venv_plan(current, link, keep) -> {link, prune, kept, ...}
"""

from __future__ import annotations

import hashlib
import os

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_python_env as _logic


def lock_select(paths, lane, override=""):
    try:
        return _logic.select_lock(str(lane), [str(p) for p in paths], str(override or ""))
    except _logic.LockError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def lock_info(text, path="lock"):
    try:
        info = _logic.lock_info(str(text), os.path.basename(str(path)))
    except _logic.LockError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    # The same digest sha256sum gives for the file (lookup('file', rstrip=false) keeps it).
    info["sha256"] = hashlib.sha256(str(text).encode("utf-8")).hexdigest()
    info["path"] = str(path)
    return info


def sync_reason(probe, marker, sha256, choice=None):
    return (
        _logic.sync_reason(marker or None, str(sha256), dict(probe or {}), dict(choice or {})) or ""
    )


def python_choice(probe, source, python, lock, install_dir):
    """The python_env role's interpreter decision from its probe and selected lock."""
    probe, lock = dict(probe or {}), dict(lock or {})
    return _logic.choose_python(
        str(source),
        str(python),
        str(probe.get("python_version") or ""),
        lock.get("python") or None,
        str(lock.get("name") or "the lock"),
        str(install_dir),
        str(probe.get("managed_python") or ""),
        str(probe.get("managed_python_version") or ""),
    )


def venv_name(sha256):
    try:
        return _logic.venv_name(str(sha256))
    except _logic.LockError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def venv_plan(probe, current, link, keep):
    try:
        return _logic.venv_plan(dict(probe or {}), str(current), str(link), int(keep))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def smoke(stdout):
    try:
        return _logic.parse_smoke(str(stdout))
    except ValueError as exc:
        raise AnsibleFilterError(f"python_env smoke test: {exc}") from exc


class FilterModule:
    def filters(self):
        return {
            "lock_select": lock_select,
            "lock_info": lock_info,
            "pins_missing": lambda pins, installed: _logic.pins_missing(
                dict(pins), str(installed or "")
            ),
            "python_env_sync_reason": sync_reason,
            "python_env_venv_needs_clear": lambda p, c=None: _logic.venv_needs_clear(
                dict(p), dict(c or {})
            ),
            "flashinfer_cache_stale": lambda m, v: _logic.flashinfer_cache_stale(
                m or None, dict(v)
            ),
            "python_env_cache_env": lambda root: _logic.cache_env(str(root)),
            "python_env_paths_inside": lambda paths, writable: _logic.paths_inside(
                dict(paths), list(writable)
            ),
            "python_env_smoke": smoke,
            "python_env_venv_name": venv_name,
            "python_env_venv_plan": venv_plan,
            "version_mismatches": lambda e, i: _logic.version_mismatches(dict(e), dict(i)),
            "parse_check_env": lambda text: _logic.parse_check_env(str(text)),
            "python_env_choice": python_choice,
            "python_install_command": lambda uv, v, d, m="": _logic.python_install_command(
                str(uv), str(v), str(d), str(m or "")
            ),
            "python_find_command": lambda uv, v, d: _logic.python_find_command(
                str(uv), str(v), str(d)
            ),
            "python_install_error": lambda err, v, d, m="": _logic.python_install_error(
                str(v), str(d), str(m or ""), str(err)
            ),
        }
