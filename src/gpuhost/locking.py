"""One run at a time per host: an flock per host the run's inventory selects.

Two gpuhost runs on the same host would race (two restarts of one server, an update rolling
while a provision converges). What is locked is the host as Ansible connects to it
(inventory.connection_targets: ansible_host or the name, and ansible_port, after --limit),
not how the inventory path is spelled, so `-i inv/x` and `-i inv/x/hosts.yml`, or two
inventories that list one machine, exclude each other, while runs on disjoint hosts do not.

The locks live in one directory per user, ~/.cache/gpuhost/locks (0700, owned by the
user), whatever --runs-dir says: LOCK_DIR_ENV names another (a test's). Runs of two users
do not see each other's locks. A lock is held from before the run record is created until
report.json is written, and released by the kernel when the process ends, however it ends.
Each lock file names its holder (pid, host and command line) so a refused run can say who.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuhost import inventory
from gpuhost.errors import EXIT_USAGE, GpuhostError

LOCK_DIR_ENV = "GPUHOST_LOCK_DIR"


def lock_dir() -> Path:
    value = os.environ.get(LOCK_DIR_ENV)
    path = Path(value).expanduser() if value else Path.home() / ".cache" / "gpuhost" / "locks"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
    except OSError as exc:
        raise GpuhostError(f"cannot create the lock directory {path}: {exc.strerror}") from None
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise GpuhostError(
            f"lock directory {path} must be owned by you with mode 0700 "
            f"(it is uid {info.st_uid}, mode {oct(info.st_mode & 0o777)}); fix or remove it"
        )
    return path


def lock_path(directory: Path, target: str) -> Path:
    return directory / f"{hashlib.sha256(target.encode()).hexdigest()[:16]}.lock"


def _targets(inventories: list[Path], limit: str | None) -> list[str]:
    try:
        return inventory.connection_targets(inventories, limit)
    except (inventory.NoHostsMatched, inventory.InventoryParseError) as exc:
        raise GpuhostError(str(exc)) from None
    except Exception as exc:  # Ansible's own message names the inventory's problem
        shown = ", ".join(str(p) for p in inventories)
        raise GpuhostError(
            f"cannot read the hosts of inventory {shown}: {inventory.explain(exc)}"
        ) from None


@contextmanager
def inventory_lock(inventories: list[Path], limit: str | None, holder: str) -> Iterator[list[Path]]:
    """Hold the lock of every host the run selects for the block; GpuhostError (exit 2),
    with nothing held, when another run holds one of them.

    `holder` is what a refused run is told about this one (the recorded command line).
    """
    directory = lock_dir()
    held: list[tuple[int, Path]] = []
    try:
        for target in _targets(inventories, limit):  # sorted: one order for every run
            path = lock_path(directory, target)
            fd = _acquire(path, target, inventories)
            held.append((fd, path))
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {target}: {holder}\n".encode(), 0)
        yield [path for _, path in held]
    finally:
        for fd, _ in held:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the descriptor releases the flock


def _acquire(path: Path, target: str, inventories: list[Path]) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise GpuhostError(f"cannot create the host lock {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        other = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise GpuhostError(f"cannot lock {path}: {exc.strerror}") from None
        shown = ", ".join(str(p) for p in inventories)
        raise GpuhostError(
            f"another gpuhost run is using host {target} (inventory {shown}): {other}; wait "
            f"for it to end (the lock {path} is released when that process exits)",
            EXIT_USAGE,
        ) from None
    return fd
