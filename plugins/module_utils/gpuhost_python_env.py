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


def python_mismatch(lock_python: str | None, host_python: str) -> str | None:
    """Why the host's Python cannot take this lock, or None when it can.

    A lock holds wheels for one Python: on another (Debian 13's 3.13 with the 3.11 locks)
    uv would have to build some packages from source (outlines-core has no cp313 wheel in
    sglang 0.5.10.post1's set), which the role forbids (--no-build).
    """
    if not lock_python:
        return None
    host = ".".join(str(host_python).split(".")[:2])
    if host == lock_python:
        return None
    return (
        f"python_env_python: {host_python} does not match the lock, which was resolved for "
        f"Python {lock_python}; allowed: a Python {lock_python} interpreter, or a lock resolved "
        f"for {host} (make lock LOCK_PYTHON={host}) given as python_env_lock_file"
    )


def sync_reason(marker: dict | None, lock_sha256: str, probe: dict) -> str | None:
    """Why the venv has to be (re)built or re-synced; None when it matches the lock."""
    if not probe.get("venv_python_version"):
        return "no venv yet" if not probe.get("venv_exists") else "venv has no working python"
    host = ".".join(str(probe.get("python_version", "")).split(".")[:2])
    venv = ".".join(str(probe["venv_python_version"]).split(".")[:2])
    if host and venv != host:
        return f"venv runs Python {venv}, the host's is {host}"
    if not marker:
        return "no marker: the venv was never verified"
    if marker.get("lock_sha256") != lock_sha256:
        return "lock changed"
    return None


def venv_needs_clear(probe: dict) -> bool:
    """A venv whose interpreter is gone or another minor version is rebuilt from empty."""
    if not probe.get("venv_exists"):
        return False
    if not probe.get("venv_python_version"):
        return True
    host = ".".join(str(probe.get("python_version", "")).split(".")[:2])
    return ".".join(str(probe["venv_python_version"]).split(".")[:2]) != host


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
