"""Pure decisions of the python_env role: which lock, what it pins, whether to re-sync.

Locks are files locks/sglang-<sglang version>-<lane>.txt made by `make lock` (uv pip compile
--generate-hashes); a lane names the CUDA line the lock's torch is built for (cu128, cu13).
The role keeps a marker (JSON) beside the venv it built; comparing the marker with the lock
decides whether anything has to happen, so an unchanged host costs one probe.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import finding

LOCK_NAME = re.compile(r"^sglang-(?P<version>\d[0-9A-Za-z.+!]*)-(?P<lane>[a-z][a-z0-9]*)\.txt$")
_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(?P<version>\S+?)\s*(?:;.*)?\\?$"
)
_PYTHON = re.compile(r"--python-version[ =](?P<version>\d+\.\d+)")
# The versions the role reports and checks after a sync: the stack the server runs on.
KEY_PACKAGES = (
    "sglang",
    "sglang-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "torch",
    "transformers",
    "triton",
)
# Compile caches SGLang's kernels libraries write at run time, by environment variable.
CACHE_ENV = {
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "TRITON_CACHE_DIR": "triton",
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
}


class LockError(ValueError):
    """Bad lock selection or a file that is not a hashed lock; the message names the variable."""


def normalize(name: str) -> str:
    """PEP 503 name: what uv writes in locks and what importlib.metadata is asked for."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins_missing(pins: dict[str, str], installed: str) -> list[str]:
    """The lock's name==version pins a venv lacks; installed is what its Python lists
    (importlib.metadata: one "Name==version" per line), names compared by PEP 503."""
    held = {}
    for line in installed.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            held[normalize(name)] = version.strip()
    return [f"{n}=={v}" for n, v in sorted(pins.items()) if held.get(normalize(n)) != v]


def lanes(paths: list[str]) -> dict[str, str]:
    """Lane -> lock path, from lock file names; two locks for one lane is an error."""
    found: dict[str, str] = {}
    for path in sorted(paths):
        match = LOCK_NAME.match(os.path.basename(path))
        if not match:
            continue
        lane = match.group("lane")
        if lane in found:
            raise LockError(
                f"two locks for lane {lane}: {os.path.basename(found[lane])} and "
                f"{os.path.basename(path)}; keep one per lane in locks/"
            )
        found[lane] = path
    return found


def select_lock(lane: str, paths: list[str], override: str = "") -> str:
    """The lock to install: python_env_lock_file when set, else the lane's lock."""
    if override:
        if not os.path.isfile(override):
            raise LockError(f"python_env_lock_file: {override} is not a file on the controller")
        return override
    available = lanes(paths)
    if lane not in available:
        allowed = ", ".join(sorted(available)) or "none (no locks/sglang-*-<lane>.txt)"
        raise LockError(f"python_env_lane: got {lane!r}; allowed: {allowed}")
    return available[lane]


def lock_info(text: str, name: str = "lock") -> dict[str, Any]:
    """Pins, target Python and key versions of a `uv pip compile --generate-hashes` lock."""
    pins: dict[str, str] = {}
    unhashed: list[str] = []
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("--hash="):
            if current:
                unhashed = [n for n in unhashed if n != current]
            continue
        if line.startswith("-"):
            # Options such as --index-url: the role passes its index itself.
            continue
        match = _PIN.match(line)
        if not match:
            raise LockError(f"{name}: {line!r} is not an exact pin (name==version); run make lock")
        current = normalize(match.group("name"))
        pins[current] = match.group("version")
        unhashed.append(current)
    if not pins:
        raise LockError(f"{name}: no pins; run make lock")
    if unhashed:
        raise LockError(f"{name}: no --hash for {', '.join(unhashed[:5])}; run make lock")
    python = _PYTHON.search(text)
    return {
        "name": name,
        "pins": pins,
        "python": python.group("version") if python else None,
        "versions": {p: pins[p] for p in KEY_PACKAGES if p in pins},
    }


def minor(version: str | None) -> str:
    """3.11.2 -> 3.11 ("" stays "")."""
    return ".".join(str(version or "").split(".")[:2])


# Where the venv's interpreter comes from: the host's own (python_env_python), or one that uv
# installs from python-build-standalone into a root-owned directory (python_env_python_source).
PYTHON_SOURCES = ("system", "managed")


def choose_python(
    source: str,
    system_python: str,
    host_version: str,
    lock_python: str | None,
    lock_name: str,
    install_dir: str,
    managed_python: str = "",
    managed_version: str = "",
    os_name: str = "",
) -> dict[str, Any]:
    """Which interpreter the venv is built from, and why; `error` is "" or the message.

    The one rule of whether the host's Python can run the lock: role python_env applies it
    to its probe (filter python_env_choice) and stops; role preflight applies it before any
    change, through python_fit_finding (module python_env_fit), and its gate stops there.

    source         python_env_python_source: system or managed
    system_python  python_env_python; host_version is what it reported ("" = does not run)
    lock_python    the X.Y the lock was resolved for (None: its header does not say)
    managed_*      the uv-managed X.Y interpreter already under install_dir, if any
    Returns {source, version (X.Y the venv must run), python (path; "" while uv still has to
    install it), python_version (full, when known), install (uv python install needed),
    install_dir, reason, error}. os_name (the host's PRETTY_NAME), when given, is named in
    the error.
    """
    choice = {
        "source": source,
        "version": lock_python or minor(host_version),
        "python": "",
        "python_version": "",
        "install": False,
        "install_dir": install_dir,
        "reason": "",
        "error": "",
    }
    if source not in PYTHON_SOURCES:
        choice["error"] = (
            f"python_env_python_source: got {source!r}; allowed: {', '.join(PYTHON_SOURCES)}"
        )
        return choice
    if source == "system":
        choice.update(python=system_python, python_version=host_version)
        if not host_version:
            wanted = f"a Python {lock_python}" if lock_python else "a Python"
            where = f" ({os_name})" if os_name else ""
            choice["error"] = (
                f"python_env_python: {system_python} does not run on this host{where}; allowed: "
                f"{wanted} interpreter, or python_env_python_source: managed (uv installs "
                f"Python {lock_python or 'of the lock'} under {install_dir})"
            )
            return choice
        host = minor(host_version)
        if lock_python and host != lock_python:
            # A lock holds wheels for one Python; on another (Debian 13's 3.13 with the 3.11
            # locks) some have no wheel (outlines-core, pinned by sglang 0.5.10.post1, has no
            # cp313 build), and the role never builds from source (--no-build).
            on = f" on {os_name}" if os_name else ""
            choice["error"] = (
                f"python_env_python: {system_python} is Python {host_version}{on}, but the lock "
                f"{lock_name} was resolved for Python {lock_python} and not every package in it "
                f"has a wheel for {host}; allowed: python_env_python_source: managed (uv "
                f"installs Python {lock_python} under {install_dir}), python_env_python "
                f"pointing at a Python {lock_python} interpreter, or a lock resolved for {host} "
                f"(make lock LOCK_PYTHON={host}) given as python_env_lock_file"
            )
            return choice
        choice["reason"] = f"the host's Python {host_version} ({system_python}) fits the lock" + (
            f" (Python {lock_python})" if lock_python else ""
        )
        return choice
    if not lock_python:
        choice["error"] = (
            f"python_env_python_source: managed needs the lock's Python version, and "
            f"{lock_name} does not name one (no --python-version in its header); allowed: a "
            f"lock made by make lock, or python_env_python_source: system"
        )
        return choice
    host = f"the host's is {host_version}" if host_version else "the host's does not run"
    if managed_python and minor(managed_version) == lock_python:
        choice.update(python=managed_python, python_version=managed_version)
        choice["reason"] = (
            f"python_env_python_source: managed: uv's Python {managed_version} under "
            f"{install_dir} ({host})"
        )
    else:
        choice["install"] = True
        choice["reason"] = (
            f"python_env_python_source: managed: uv installs Python {lock_python} under "
            f"{install_dir} ({host})"
        )
    return choice


# How module python_env_fit asks an interpreter its version: -I -S, no site-packages and no
# .pth hooks run (as python_env_probe does).
PYTHON_VERSION_ARGV = ("-I", "-S", "-c", "import platform; print(platform.python_version())")


def python_fit_finding(
    source: str,
    system_python: str,
    host_version: str,
    lock_python: str | None,
    lock_name: str,
    install_dir: str,
    os_name: str = "",
) -> dict[str, str]:
    """choose_python as a preflight finding (docs/facts.md: {check, status, message, fix}):
    fail when role python_env would stop on this host, before anything is installed.

    The managed interpreter is not looked for here: with python_env_python_source: managed
    uv installs the lock's Python in the runtime stage, which is no reason to stop."""
    choice = choose_python(
        source, system_python, host_version, lock_python, lock_name, install_dir, os_name=os_name
    )
    check = "python_env.python"
    if not choice["error"]:
        return finding(check, "pass", choice["reason"])
    fix = ""
    if source == "system" and lock_python:
        fix = (
            f"set python_env_python_source: managed (inventory group_vars or host_vars): uv "
            f"installs Python {lock_python} under {install_dir} and the venv is built from it; "
            f"the distro's Python stays as it is"
        )
    return finding(check, "fail", choice["error"], fix)


def python_install_command(
    uv: str, version: str, install_dir: str, mirror: str = ""
) -> dict[str, Any]:
    """`uv python install` of the managed interpreter, run as root into a root-owned
    directory: no cache (root reads nothing the service account can write, and uv's cache
    is the service account's), no executables in root's ~/.local/bin, downloads allowed for
    this one explicit install only (every other uv call has UV_PYTHON_DOWNLOADS=never)."""
    argv = [uv, "python", "install", "--no-bin", "--install-dir", install_dir]
    if mirror:
        argv += ["--mirror", mirror]
    env = {
        "UV_PYTHON_DOWNLOADS": "manual",
        "UV_PYTHON_INSTALL_DIR": install_dir,
        "UV_NO_CACHE": "1",
        "UV_NATIVE_TLS": "1",
        "UV_NO_PROGRESS": "1",
    }
    return {"argv": [*argv, version], "env": env}


def python_find_command(uv: str, version: str, install_dir: str) -> dict[str, Any]:
    """`uv python find` of the managed interpreter just installed (read-only)."""
    return {
        "argv": [uv, "python", "find", "--managed-python", "--no-project", version],
        "env": {
            "UV_PYTHON_DOWNLOADS": "never",
            "UV_PYTHON_INSTALL_DIR": install_dir,
            "UV_NO_CACHE": "1",
        },
    }


def python_install_error(version: str, install_dir: str, mirror: str, stderr: str) -> str:
    """The message when uv cannot install the managed interpreter (no download reachable)."""
    lines = [line.strip() for line in str(stderr).splitlines() if line.strip()]
    causes = [line.removeprefix("Caused by:").strip() for line in lines if "Caused by" in line]
    errors = [line for line in lines if line.startswith("error:")] or lines
    first = errors[0].removeprefix("error:").strip() if errors else "no output"
    why = f"{first}: {causes[-1]}" if causes else first
    source = (
        f"the mirror {mirror} (python_env_python_install_mirror)"
        if mirror
        else "python-build-standalone's GitHub releases"
    )
    return (
        f"python_env_python_source: managed: uv could not install Python {version} into "
        f"{install_dir} from {source} ({why}). Either pre-install a Python {version} on the "
        f"host and set python_env_python_source: system with python_env_python pointing at "
        f"it (e.g. /usr/bin/python{version}), or set python_env_python_install_mirror to a "
        f"mirror of python-build-standalone's releases this host can reach "
        f"(uv's UV_PYTHON_INSTALL_MIRROR)"
    )


def _venv_python_problem(probe: dict, choice: dict | None) -> str | None:
    """Why the venv's interpreter is not the one chosen; None when it is."""
    want = (choice or {}).get("version") or minor(probe.get("python_version", ""))
    venv = minor(probe["venv_python_version"])
    if want and venv != want:
        return f"venv runs Python {venv}, the selected one is {want}"
    if not choice:
        return None
    install_dir = str(choice.get("install_dir") or "").rstrip("/")
    home = str(probe.get("venv_home") or "")
    managed = bool(install_dir) and (home + "/").startswith(install_dir + "/")
    if choice.get("source") == "managed" and not managed:
        return f"venv built from {home or 'an unknown Python'}, not uv's managed Python"
    if choice.get("source") == "system" and managed:
        return "venv built from uv's managed Python, python_env_python_source is system"
    return None


def paths_inside(paths: dict[str, str], writable: list[str]) -> list[str]:
    """'<variable>: <path> is inside <dir>' for each root-owned path at or under a directory
    the service can write (normalised, so /a/./b and /a/b/ count as /a/b)."""
    problems = []
    roots = [os.path.normpath(str(w)) for w in writable if str(w or "").strip()]
    for name, path in paths.items():
        norm = os.path.normpath(str(path))
        for root in roots:
            if norm == root or norm.startswith(root.rstrip("/") + "/"):
                problems.append(f"{name}: {path} is inside {root}")
                break
    return problems


def sync_reason(
    marker: dict | None, lock_sha256: str, probe: dict, choice: dict | None = None
) -> str | None:
    """Why the venv has to be (re)built or re-synced; None when it matches the lock."""
    if probe.get("venv_not_root"):
        return f"venv not root's ({probe['venv_not_root']})"
    if not probe.get("venv_python_version"):
        return "no venv yet" if not probe.get("venv_exists") else "venv has no working python"
    problem = _venv_python_problem(probe, choice)
    if problem:
        return problem
    if not marker:
        return "no marker: the venv was never verified"
    if marker.get("lock_sha256") != lock_sha256:
        return "lock changed"
    return None


def venv_needs_clear(probe: dict, choice: dict | None = None) -> bool:
    """A venv whose interpreter is gone, another minor version or from the other source is
    rebuilt from empty, and so is one the service account could have written (owned by it
    before the venv became root's)."""
    if not probe.get("venv_exists"):
        return False
    if probe.get("venv_not_root") or not probe.get("venv_python_version"):
        return True
    return _venv_python_problem(probe, choice) is not None


def flashinfer_cache_stale(marker: dict | None, versions: dict[str, str]) -> bool:
    """FlashInfer's JIT cache holds kernels of the version that built them: wipe it on any
    change, and when no marker says which version wrote it."""
    new = versions.get("flashinfer-python")
    old = ((marker or {}).get("versions") or {}).get("flashinfer-python")
    return old != new


def cache_env(root: str) -> dict[str, str]:
    return {var: os.path.join(root, sub) for var, sub in CACHE_ENV.items()}


def parse_smoke(stdout: str) -> dict[str, Any]:
    """The JSON line the import smoke test prints after its GPUHOST_SMOKE tag."""
    import json

    for line in reversed(stdout.splitlines()):
        if line.startswith("GPUHOST_SMOKE "):
            return json.loads(line[len("GPUHOST_SMOKE ") :])
    raise ValueError("the smoke test printed no GPUHOST_SMOKE line")


def version_mismatches(expected: dict[str, str], installed: dict[str, str]) -> list[str]:
    return [
        f"{name}: lock {want}, installed {installed.get(name, 'nothing')}"
        for name, want in sorted(expected.items())
        if installed.get(name) != want
    ]


_CHECK_ENV_LINE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 _./(),+-]{0,60}): ?(?P<value>.*)$")


def parse_check_env(text: str) -> dict[str, str]:
    """`python -m sglang.check_env` prints "Key: value" lines; a value may continue on
    following lines (the nvidia-smi topology), which are kept with it."""
    info: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        match = _CHECK_ENV_LINE.match(line)
        if match and not line.startswith((" ", "\t")):
            key = match.group("key").strip()
            info[key] = match.group("value").rstrip()
        elif key is not None and line.strip():
            info[key] = (info[key] + "\n" + line.rstrip()).strip("\n")
    return info


# --- Side-by-side venvs ------------------------------------------------------------------
# Each lock gets its own venv, python_env_venvs_dir/<first 16 hex digits of the lock's
# sha256>, built while the venv of the previous lock still serves. python_env_venv_dir is a
# symbolic link to the venv of the inventory's lock; the server's unit names the venv itself
# (sglang_server resolves the link when it renders), so restoring a kept unit restores its
# venv too, with nothing to reinstall. VENV_NAME is what python_env_probe lists as a venv.
VENV_NAME_LENGTH = 16
VENV_NAME = re.compile(rf"^[0-9a-f]{{{VENV_NAME_LENGTH}}}$")


def venv_name(lock_sha256: str) -> str:
    """The directory name of a lock's venv: the first 16 hex digits of the lock's sha256."""
    digest = str(lock_sha256 or "").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise LockError(f"lock sha256: got {lock_sha256!r}; expected 64 hex digits")
    return digest[:VENV_NAME_LENGTH]


def venv_plan(probe: dict, current: str, link: str, keep: int) -> dict[str, Any]:
    """What to do with the link and the venvs once `current` (the venv of this run's lock)
    is built and verified.

    probe: the python_env_probe result (link, venvs, references).
    Returns link ('ok', 'create', 'switch', 'replace_dir' or 'keep_dir'), legacy_users (the
    files that still name a real directory at the link's path), prune (venv paths to
    delete) and kept ({path: why}).

    A venv is kept when it is the current one, when a file the probe read names it (a live
    unit, a known-good, previous or pending config: a rollback may start it again), or when
    it is among the `keep` newest (the current one counts). Everything else goes, oldest
    first; a venv never verified (no marker: a failed build) counts as the oldest.
    """
    if int(keep) < 1:
        raise ValueError(f"python_env_venvs_keep: got {keep!r}; allowed: an integer >= 1")
    current = os.path.normpath(str(current))
    link = os.path.normpath(str(link))
    refs = {os.path.normpath(k): list(v) for k, v in (probe.get("references") or {}).items()}
    state = probe.get("link") or {}
    kind = state.get("kind", "absent")
    legacy_users: list[str] = []
    if kind == "absent":
        action = "create"
    elif kind == "link":
        target = os.path.normpath(os.path.join(os.path.dirname(link), state.get("target") or ""))
        action = "ok" if target == current else "switch"
    elif kind == "dir":
        legacy_users = sorted(refs.get(link, []))
        action = "keep_dir" if legacy_users else "replace_dir"
    else:
        raise ValueError(
            f"python_env_venv_dir: {link} is a {kind}, neither a venv directory nor the link "
            "to one; move it away and run again"
        )
    kept: dict[str, str] = {current: "the venv of this run's lock"}
    venvs = [v for v in probe.get("venvs") or [] if os.path.normpath(v["path"]) != current]
    for venv in venvs:
        path = os.path.normpath(venv["path"])
        if refs.get(path):
            kept[path] = "named by " + ", ".join(sorted(refs[path]))
    verified = [v for v in venvs if v.get("verified")]
    room = int(keep) - 1
    for venv in sorted(verified, key=lambda v: float(v.get("time") or 0), reverse=True):
        path = os.path.normpath(venv["path"])
        if path in kept or room <= 0:
            continue
        kept[path] = f"among the {int(keep)} newest (python_env_venvs_keep)"
        room -= 1
    paths = (os.path.normpath(v["path"]) for v in venvs)
    prune = sorted(path for path in paths if path not in kept)
    return {"link": action, "legacy_users": legacy_users, "prune": prune, "kept": kept}
