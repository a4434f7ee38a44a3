"""One run at a time per inventory: an flock on runs/.locks/<inventory key>.lock.

Two gpuhost runs against the same inventory would race on the same hosts (two restarts of
one server, an update rolling while a provision converges). The lock is keyed by the
resolved inventory paths, held from before the run record is created until report.json is
written, and released by the kernel when the process ends, however it ends. The lock file
names its holder (pid and command line) so the second run can say who holds it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuhost.errors import EXIT_USAGE, GpuhostError

LOCK_DIR = ".locks"


def lock_path(runs_root: Path, inventories: list[Path]) -> Path:
    key = "\n".join(sorted(str(p.resolve()) for p in inventories))
    return runs_root / LOCK_DIR / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.lock"


@contextmanager
def inventory_lock(runs_root: Path, inventories: list[Path], holder: str) -> Iterator[Path]:
    """Hold the inventory's lock for the block; GpuhostError (exit 2) when another run has it.

    `holder` is what a refused run is told about this one (the recorded command line).
    """
    path = lock_path(runs_root, inventories)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise GpuhostError(f"cannot create the inventory lock {path}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise GpuhostError(f"cannot lock {path}: {exc.strerror}") from None
            other = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
            inventory = ", ".join(str(p) for p in inventories)
            raise GpuhostError(
                f"another gpuhost run is using inventory {inventory}: {other}; wait for it "
                f"to end (the lock {path} is released when that process exits)",
                EXIT_USAGE,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {holder}\n".encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the flock
