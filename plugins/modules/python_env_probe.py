#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""One read-only look at a python_env venv, cheap enough to run on every play."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.python_env_probe
short_description: Read the state of the python_env venv, its marker and the pinned uv
description:
  - Reports the host Python's version, whether the venv exists and which Python it runs
    (and the C(home) its C(pyvenv.cfg) names), a uv-managed interpreter of the wanted
    version under I(python_install_dir), the version of the uv the role installed, the
    marker the role wrote after the last verified sync, and whether an NVIDIA GPU device
    node is present.
  - Never changes anything (check mode safe). The role compares the result with the
    selected lock to decide whether to do anything at all, which keeps a re-run of an
    unchanged host to one remote call.
options:
  python: {description: The interpreter the venv is built from., type: path, required: true}
  venv: {description: The venv directory., type: path, required: true}
  marker: {description: The role's marker file (JSON)., type: path, required: true}
  uv: {description: The uv binary the role installs., type: path, required: true}
  python_install_dir:
    description: Where uv installs managed interpreters (UV_PYTHON_INSTALL_DIR); unset = no look.
    type: path
  python_install_version:
    description: The X.Y of the managed interpreter to look for.
    type: str
    default: ""
  gpu_devices:
    description: Device nodes whose presence means an NVIDIA GPU is usable.
    type: list
    elements: path
    default: [/dev/nvidiactl, /dev/nvidia0]
  dirs:
    description: Directories that must exist with owner, group and mode; the ones that do
      not are returned in dirs_wrong (so the role touches them only then). Each is looked at
      with lstat, so a symbolic link there is wrong, whatever its target.
    type: list
    elements: path
    default: []
  owner: {description: Owner the dirs must have., type: str, default: root}
  group: {description: Group the dirs must have., type: str, default: root}
  mode: {description: Octal mode the dirs must have., type: str, default: "0750"}
  venvs_dir:
    description: Directory of the side-by-side venvs (one per lock, named by 16 hex digits);
      unset = no look.
    type: path
  link:
    description: The link that names the current venv (python_env_venv_dir); unset = no look.
    type: path
  references:
    description:
      - Files, or directories read recursively (symbolic links skipped, files up to 1 MiB),
        whose text may name a venv or the link (units, kept configs). For each venv under
        I(venvs_dir) and for I(link), the files naming C(<path>/) are returned in
        C(references).
    type: list
    elements: path
    default: []
author: gpuhost
"""

EXAMPLES = r"""
- name: Look at the venv
  gpuhost.gpu.python_env_probe:
    python: /usr/bin/python3
    venv: /opt/gpuhost/venv
    marker: /opt/gpuhost/venv/gpuhost-env.json
    uv: /opt/gpuhost/uv/bin/uv
  register: probe
"""

RETURN = r"""
python_version:
  description: Host interpreter version, e.g. 3.11.2; empty when it does not run.
  type: str
  returned: always
venv_exists: {description: The venv directory exists., type: bool, returned: always}
venv_python_version:
  description: The venv's Python version; empty when it has none that runs.
  type: str
  returned: always
venv_not_root:
  description:
    - Why the venv is not root's alone (a part the interpreter is reached through, or its
      C(pyvenv.cfg), is owned by another account or writable by group or others); empty when
      it is. The venv's Python is not run then (root would run a file another account wrote).
  type: str
  returned: always
venv_home:
  description: The venv's pyvenv.cfg C(home) (its interpreter's directory); empty when absent.
  type: str
  returned: always
managed_python:
  description: The newest uv-managed CPython X.Y under python_install_dir; empty when none.
  type: str
  returned: always
managed_python_version: {description: Its version; empty when none., type: str, returned: always}
uv_version:
  description: Version of the installed uv, e.g. 0.9.30; empty when absent.
  type: str
  returned: always
marker:
  description: The marker's content; null when absent or unreadable.
  type: dict
  returned: always
gpu_present: {description: One of gpu_devices exists., type: bool, returned: always}
dirs_wrong:
  description: The dirs that are missing, not directories (a symbolic link is not one), or of
    another owner, group or mode.
  type: list
  elements: str
  returned: always
link:
  description: What I(link) is (C(kind) link, dir, absent or other) and a link's C(target).
  type: dict
  returned: always
venvs:
  description: The venvs under I(venvs_dir) (C(path), C(verified) when a marker is there,
    C(time) of the marker or directory, C(lock_sha256) from the marker).
  type: list
  elements: dict
  returned: always
current_marker:
  description: The marker of the venv I(link) leads to (the one that served before this
    run); null when absent or unreadable.
  type: dict
  returned: always
references:
  description: For each venv path and the link, the files of I(references) that name it.
  type: dict
  returned: always
"""

# Ansible modules keep their imports below the documentation strings.
import glob  # noqa: E402
import grp  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
import stat  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_python_env import (  # noqa: E402
    VENV_NAME,
)

# -I -S: no site-packages and no .pth hooks (the stack's cost ~80 ms of start-up each).
_VERSION = ["-I", "-S", "-c", "import platform; print(platform.python_version())"]


def _run_version(module, argv):
    if not os.access(argv[0], os.X_OK):
        return ""
    rc, out, _ = module.run_command(argv)
    return out.strip() if rc == 0 else ""


def _venv_home(venv):
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep and key.strip() == "home":
                    return value.strip()
    except OSError:
        pass
    return ""


def _venv_not_root(venv):
    """Why root must not run this venv's Python: the directories and links leading to its
    interpreter, and pyvenv.cfg (which decides sys.prefix), must be root's and not writable
    by group or others. A missing path is no reason (the venv is then rebuilt anyway)."""
    for part in ("", "bin", os.path.join("bin", "python"), "pyvenv.cfg"):
        path = os.path.join(venv, part) if part else venv
        try:
            st = os.lstat(path)
        except OSError:
            continue
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        if st.st_uid != 0:
            return f"{path} is owned by {owner}"
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} is writable by group or others ({stat.S_IMODE(st.st_mode):04o})"
    return ""


def _managed_python(module, install_dir, version):
    """uv lays out cpython-X.Y.Z-<platform>/bin/pythonX.Y (and a cpython-X.Y-<platform> link,
    which the pattern leaves out, and free-threaded builds); the newest patch release wins."""
    if not install_dir or not version:
        return "", ""
    found = []
    for path in glob.glob(
        os.path.join(install_dir, f"cpython-{version}.*", "bin", f"python{version}")
    ):
        if "freethreaded" in path:
            continue
        got = _run_version(module, [path, *_VERSION])
        if got.startswith(version + "."):
            found.append((tuple(int(x) for x in got.split(".")[:3] if x.isdigit()), path, got))
    if not found:
        return "", ""
    _, path, got = max(found)
    return path, got


def _dir_ok(path, owner, group, mode):
    """lstat, never stat: a link the service account planted in its cache directory is not
    the directory (its target's owner and mode say nothing), so it is wrong, and the role's
    gpuhost.gpu.service_path task then refuses it, naming it."""
    try:
        st = os.lstat(path)
        return (
            stat.S_ISDIR(st.st_mode)
            and pwd.getpwuid(st.st_uid).pw_name == owner
            and grp.getgrgid(st.st_gid).gr_name == group
            and stat.S_IMODE(st.st_mode) == int(mode, 8)
        )
    except (OSError, KeyError):
        return False


_MAX_REFERENCE_BYTES = 1 << 20


def _read_marker(path):
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _link_state(path):
    if not path:
        return {"kind": "absent", "target": ""}
    try:
        st = os.lstat(path)
    except OSError:
        return {"kind": "absent", "target": ""}
    if stat.S_ISLNK(st.st_mode):
        return {"kind": "link", "target": os.readlink(path)}
    return {"kind": "dir" if stat.S_ISDIR(st.st_mode) else "other", "target": ""}


def _venvs(venvs_dir, marker_name):
    found = []
    try:
        names = sorted(os.listdir(venvs_dir)) if venvs_dir else []
    except OSError:
        names = []
    for name in names:
        path = os.path.join(venvs_dir, name)
        if not VENV_NAME.match(name) or os.path.islink(path) or not os.path.isdir(path):
            continue
        marker_path = os.path.join(path, marker_name)
        data = _read_marker(marker_path)
        entry = {
            "path": path,
            "verified": data is not None,
            "lock_sha256": str((data or {}).get("lock_sha256") or ""),
            "time": os.stat(marker_path if data is not None else path).st_mtime,
        }
        found.append(entry)
    return found


def _reference_files(paths):
    for top in paths:
        if os.path.islink(top):
            continue
        if os.path.isfile(top):
            yield top
            continue
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
            for name in files:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    yield path


def _references(paths, candidates):
    found = {c: [] for c in candidates}
    for path in _reference_files(paths):
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_REFERENCE_BYTES:
                continue
            with open(path, "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        for candidate in candidates:
            if candidate.rstrip("/") + "/" in text:
                found[candidate].append(path)
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "venv": {"type": "path", "required": True},
            "marker": {"type": "path", "required": True},
            "uv": {"type": "path", "required": True},
            "python_install_dir": {"type": "path"},
            "python_install_version": {"type": "str", "default": ""},
            "gpu_devices": {
                "type": "list",
                "elements": "path",
                "default": ["/dev/nvidiactl", "/dev/nvidia0"],
            },
            "dirs": {"type": "list", "elements": "path", "default": []},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "mode": {"type": "str", "default": "0750"},
            "venvs_dir": {"type": "path"},
            "link": {"type": "path"},
            "references": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    marker = _read_marker(p["marker"])
    uv = _run_version(module, [p["uv"], "--version"])
    managed, managed_version = _managed_python(
        module, p["python_install_dir"], p["python_install_version"]
    )
    not_root = _venv_not_root(p["venv"])
    venvs = _venvs(p["venvs_dir"], os.path.basename(p["marker"]))
    candidates = [v["path"] for v in venvs] + ([p["link"]] if p["link"] else [])
    module.exit_json(
        changed=False,
        python_version=_run_version(module, [p["python"], *_VERSION]),
        venv_exists=os.path.isdir(p["venv"]),
        venv_not_root=not_root,
        venv_python_version=""
        if not_root
        else _run_version(module, [os.path.join(p["venv"], "bin", "python"), *_VERSION]),
        venv_home=_venv_home(p["venv"]),
        managed_python=managed,
        managed_python_version=managed_version,
        uv_version=uv.split()[1] if len(uv.split()) > 1 else "",
        marker=marker,
        current_marker=_read_marker(os.path.join(p["link"], os.path.basename(p["marker"])))
        if p["link"]
        else None,
        gpu_present=any(os.path.exists(d) for d in p["gpu_devices"]),
        dirs_wrong=[d for d in p["dirs"] if not _dir_ok(d, p["owner"], p["group"], p["mode"])],
        link=_link_state(p["link"]),
        venvs=venvs,
        references=_references(p["references"], candidates) if p["references"] else {},
    )


if __name__ == "__main__":
    main()
