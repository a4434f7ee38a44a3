# Copyright: gpuhost contributors
# Apache-2.0
"""Read what a user left, as root, without following anything the user could have planted.

Read-only counterpart of gpuhost_service_path's walk (gpuhost_sglang_discover reads a
server's venv and hub cache with it): every path is opened from / one component at a time
with openat and O_NOFOLLOW, a symbolic link is followed only by gpuhost_service_path's rule
(root's, in a directory only root can change: an admin's /home -> /data/home), and no file
larger than the cap is read. gpuhost_service_path.read_file is not used for this: it refuses a
file with more than one link, which a venv uv installed by hard link is full of, and reads any
size.
"""

from __future__ import annotations

import errno
import os
import stat

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (
    followable_link,
)

# Links followed on one walk, as the kernel allows (MAXSYMLINKS).
MAX_LINKS = 40
# The most of one file read (METADATA headers, pyvenv.cfg, refs/main, /proc/PID/*).
READ_CAP = 1 << 20
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotRead(Exception):
    """A path root does not read: a link on the way, too large, not a regular file."""


def _parts(path: str) -> list[str]:
    if not os.path.isabs(path):
        raise NotRead(f"{path}: not an absolute path")
    return [p for p in os.path.normpath(path).split("/") if p]


def open_dir(path: str, links: int = 0) -> int:
    """A descriptor of the directory at path, opened from / one component at a time without
    following a symbolic link a user could have made: a link is followed only by
    gpuhost_service_path's rule (root's, in a directory only root can change, e.g. an admin's
    /home -> /data/home); NotRead names anything else in the way."""
    parts = _parts(path)
    fd = os.open("/", _DIR)
    here = ""
    for index, part in enumerate(parts):
        try:
            nxt = os.open(part, _DIR, dir_fd=fd)
        except OSError as err:
            try:
                target = _trusted_link(fd, part, err, here, links)
            finally:
                os.close(fd)
            base = target if target.startswith("/") else os.path.join(here or "/", target)
            return open_dir(os.path.join(base, *parts[index + 1 :]), links + 1)
        os.close(fd)
        fd = nxt
        here += "/" + part
    return fd


def _trusted_link(fd: int, name: str, err: OSError, here: str, links: int) -> str:
    """The target of the link `name` in the directory fd when root may follow it."""
    where = f"{here}/{name}"
    if err.errno not in (errno.ELOOP, errno.ENOTDIR):
        raise NotRead(f"{where}: {os.strerror(err.errno)}") from None
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        raise NotRead(f"{where}: not a directory")
    if not followable_link(os.fstat(fd), st) or links >= MAX_LINKS:
        raise NotRead(
            f"{where}: a symbolic link a user could have made; not followed (root follows "
            "only root's links in directories only root can change)"
        )
    return os.readlink(name, dir_fd=fd)


def read_file(path: str, cap: int = READ_CAP) -> bytes:
    """The regular file at path (no link anywhere on the way), at most cap bytes; NotRead
    when it is larger, a link, or not a regular file."""
    parent, leaf = os.path.split(os.path.normpath(path))
    dfd = open_dir(parent)
    try:
        try:
            fd = os.open(leaf, _FILE, dir_fd=dfd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise NotRead(f"{path}: a symbolic link; not followed") from None
            raise NotRead(f"{path}: {os.strerror(err.errno)}") from None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRead(f"{path}: not a regular file")
        if st.st_size > cap:
            raise NotRead(f"{path}: {st.st_size} bytes, more than the {cap} read")
        return os.read(fd, cap)
    finally:
        os.close(fd)


def list_dir(path: str) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of each entry of the directory at path (no link followed)."""
    fd = open_dir(path)
    try:
        return [(n, os.stat(n, dir_fd=fd, follow_symlinks=False)) for n in sorted(os.listdir(fd))]
    finally:
        os.close(fd)
