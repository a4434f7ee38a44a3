"""Make a directory or write a file where the service account can write, without following
anything it planted. The pure half of the `service_path` module.

Root creates the server's caches and markers inside directories the service account owns
(gpuhost_cache_dir, gpuhost_service_state_dir). ansible.builtin.file and copy act by path and
follow a symbolic link: had the account replaced /var/cache/gpuhost/flashinfer by a link to
/etc/systemd/system, the next run would chown that to the account (a root shell on the next
restart). Here every step is taken on an open descriptor:

- the walk starts at / and opens one component at a time (openat with O_NOFOLLOW|O_DIRECTORY);
- a symbolic link is followed only when it lies in a trusted directory (root's, writable by
  no group and no one else) and is root's: only root could have made it, e.g. an admin's
  /var/cache/gpuhost -> /data/gpuhost. Its target is walked by the same rules;
- in any other directory a component must be a real directory (the leaf file: a regular file
  with one link); anything else (a link, a FIFO, a device, a socket, a hard-linked file) is
  refused with ServicePathError, naming the path, what is there and who can write its parent;
- what is missing is created with mkdirat; owner and mode are set with fchown/fchmod on the
  opened descriptor; a file is written to an O_CREAT|O_EXCL|O_NOFOLLOW temporary file in the
  opened directory and renamed over the name;
- in check mode nothing is opened for writing: the result says what would be created or
  changed, and a missing parent is one more thing that would be created, never an error.

Missing parents are made root:root 0755 (the account needs only the leaf it owns).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import secrets
import stat
from typing import Any

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Symbolic links followed on one walk, as the kernel allows (MAXSYMLINKS).
_MAX_LINKS = 40
# What a diff shows of a file at most (a larger one is read this far: changed all the same).
_DIFF_MAX = 1 << 20
PARENT_MODE = 0o755


class ServicePathError(Exception):
    """A path root must not act on; the message names it and says what to do."""


def _owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _trusted(st: os.stat_result) -> bool:
    """Only root can add, remove or rename entries of this directory."""
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def followable_link(parent_st: os.stat_result, link_st: os.stat_result) -> bool:
    """The one rule for a symbolic link root follows: root's, in a directory only root can
    change (also used by the read-only walk of gpuhost_sglang_discover)."""
    return _trusted(parent_st) and link_st.st_uid == 0


def _what(st: os.stat_result, dir_fd: int, name: str) -> str:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = "?"
        return f"a symbolic link to {target} (owned by {_owner_name(st.st_uid)})"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISREG(mode) and st.st_nlink > 1:
        return f"a hard link ({st.st_nlink} links to one file)"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    return f"something of type {stat.S_IFMT(mode):o}"


def _refuse(path: str, found: str, parent: str, parent_st: os.stat_result, want: str) -> None:
    raise ServicePathError(
        f"{path} is {found}, not {want}: root does not follow or change it. It was put there "
        f"by whoever can write {parent} (owned by {_owner_name(parent_st.st_uid)}, mode "
        f"{stat.S_IMODE(parent_st.st_mode):04o}). Look at what made it, remove it (rm {path}) "
        "and run again."
    )


def _split(path: str) -> list[str]:
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ServicePathError(f"path: {path!r} is not absolute; give the full path")
    parts = [part for part in path.split("/") if part and part != "."]
    if not parts:
        raise ServicePathError("path: / is not a path root makes for the service account")
    return parts


def _open_dir(fd: int, name: str, here: str, where: str) -> int:
    """Open a directory entry without following it; anything else is refused."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        _refuse(
            here, _what(os.lstat(name, dir_fd=fd), fd, name), where, os.fstat(fd), "a directory"
        )
        raise  # pragma: no cover - _refuse raises


def _walk(
    fds: list[int], path: str, check: bool, created: list[str]
) -> tuple[int | None, str, str]:
    """Open the directory the leaf of path lies in, by the rules above. Returns its
    descriptor (None: check mode found a directory on the way missing), the leaf's name and
    the directory's path as walked. Trusted links, the leaf's too, are followed here; any
    other leaf is left to the caller, which knows what it wants there."""
    todo = _split(path)
    fd: int | None = os.open("/", _DIR_FLAGS)
    fds.append(fd)
    where = "/"
    links = 0
    while True:
        name = todo.pop(0)
        here = os.path.dirname(where) or "/" if name == ".." else os.path.join(where, name)
        if fd is None:
            if not todo:
                return None, name, where
            created.append(here)
            where = here
            continue
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            parent_st = os.fstat(fd)
            if followable_link(parent_st, st):
                if links >= _MAX_LINKS:
                    raise ServicePathError(f"{here}: more than {_MAX_LINKS} links on the way")
                links += 1
                target = os.readlink(name, dir_fd=fd)
                todo[:0] = [p for p in target.split("/") if p and p != "."]
                if target.startswith("/"):
                    fd = os.open("/", _DIR_FLAGS)
                    fds.append(fd)
                    where = "/"
                if not todo:
                    raise ServicePathError(f"{here}: a link to / is not a path to act on")
                continue
            if not todo:
                return fd, name, where
            _refuse(here, _what(st, fd, name), where, parent_st, "a directory")
        if not todo:
            return fd, name, where
        made = False
        if st is None:
            if check:
                created.append(here)
                fd, where = None, here
                continue
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
                made = True
            except FileExistsError:
                pass
        sub = _open_dir(fd, name, here, where)
        fds.append(sub)
        if made:
            os.fchown(sub, 0, 0)
            os.fchmod(sub, PARENT_MODE)
            created.append(here)
        fd, where = sub, here


def account_ids(owner: str, group: str, check: bool) -> tuple[int | None, int | None]:
    """uid and gid; in check mode the account (role base makes it) may not exist yet."""
    ids = []
    for what, name, lookup in (("owner", owner, pwd.getpwnam), ("group", group, grp.getgrnam)):
        try:
            ids.append(lookup(name)[2])
        except KeyError:
            if not check:
                kind = "user" if what == "owner" else "group"
                raise ServicePathError(f"{what}: no {kind} {name!r} on the host") from None
            ids.append(None)
    return ids[0], ids[1]


def _wrong(st: os.stat_result, uid: int | None, gid: int | None, mode: int) -> list[str]:
    wrong = []
    if uid is None or st.st_uid != uid:
        wrong.append("owner")
    if gid is None or st.st_gid != gid:
        wrong.append("group")
    if stat.S_IMODE(st.st_mode) != mode:
        wrong.append("mode")
    return wrong


def _lstat(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return None


def _result(changed: bool, path: str, created: list[str], fixed: list[str]) -> dict[str, Any]:
    return {"changed": changed, "path": path, "created": created, "fixed": fixed}


@contextlib.contextmanager
def _at_leaf(path: str, check: bool):
    """Walk to path's directory (_walk) and yield (fd, leaf, where, full, st, fds, created):
    st is the leaf's lstat (None: missing, or its directory is); every descriptor opened on
    the way, and any the caller adds to fds, is closed on the way out."""
    fds: list[int] = []
    created: list[str] = []
    try:
        fd, leaf, where = _walk(fds, path, check, created)
        st = None if fd is None else _lstat(fd, leaf)
        yield fd, leaf, where, os.path.join(where, leaf), st, fds, created
    finally:
        for opened in fds:
            os.close(opened)


def ensure_directory(
    path: str, owner: str, group: str, mode: int, check: bool = False
) -> dict[str, Any]:
    """Make path a directory of owner:group with mode (fixed: what was wrong with it)."""
    with opened_directory(path, owner, group, mode, check) as (_dfd, result):
        return result


@contextlib.contextmanager
def opened_directory(
    path: str, owner: str | None = None, group: str = "", mode: int = 0, check: bool = False
):
    """Yield (descriptor, result) of the directory at path, found by the walk's rules.

    With owner: as ensure_directory (made if missing, owner, group and mode set), the
    descriptor None in check mode when it would be made. Without: an existing directory
    opened as it is, nothing made or changed (ServicePathError when it is missing)."""
    uid, gid = account_ids(owner, group, check) if owner is not None else (None, None)
    with _at_leaf(path, check or owner is None) as (fd, leaf, where, full, st, fds, created):
        if st is None:
            if owner is None:
                raise ServicePathError(f"{full} does not exist (or a directory above it)")
            created.append(full)
            if check:
                yield None, _result(True, full, created, [])
                return
            with contextlib.suppress(FileExistsError):
                os.mkdir(leaf, 0o700, dir_fd=fd)
        elif not stat.S_ISDIR(st.st_mode):
            _refuse(full, _what(st, fd, leaf), where, os.fstat(fd), "a directory")
        dfd = _open_dir(fd, leaf, full, where)
        fds.append(dfd)
        wrong = [] if st is None or owner is None else _wrong(os.fstat(dfd), uid, gid, mode)
        if (st is None or wrong) and not check:
            os.fchown(dfd, uid, gid)
            os.fchmod(dfd, mode)
        yield dfd, _result(bool(wrong or created), full, created, wrong)


def write_file(
    path: str,
    content: bytes,
    owner: str,
    group: str,
    mode: int,
    check: bool = False,
    root_dir: bool = False,
    keep_before: bool = False,
) -> dict[str, Any]:
    """Make path a regular file (one link) of owner:group with mode holding content.

    root_dir: the file's directory must be one only root can change (root's, writable by no
    group and no one else), or nothing is written. keep_before: the result's `before` holds
    what the file held (b"" when it was missing), for a diff."""
    uid, gid = account_ids(owner, group, check)
    with _at_leaf(path, check) as (fd, leaf, where, full, st, fds, created):
        if root_dir and fd is not None:
            _require_root_dir(fd, where)
        if st is None:
            created.append(full)
            if not check:
                _replace(fd, leaf, content, uid, gid, mode)
            result = _result(True, full, created, [])
            if keep_before:
                result["before"] = b""
            return result
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            _refuse(full, _what(st, fd, leaf), where, os.fstat(fd), "a regular file")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        ffd = os.open(leaf, flags, dir_fd=fd)
        fds.append(ffd)
        fst = os.fstat(ffd)
        if not stat.S_ISREG(fst.st_mode) or fst.st_nlink != 1:
            _refuse(full, _what(fst, fd, leaf), where, os.fstat(fd), "a regular file")
        before = _read_all(
            ffd, max(len(content) + 1, _DIFF_MAX) if keep_before else len(content) + 1
        )
        if before != content:
            if not check:
                _replace(fd, leaf, content, uid, gid, mode)
            result = _result(True, full, created, ["content"])
        else:
            wrong = _wrong(fst, uid, gid, mode)
            if wrong and not check:
                os.fchown(ffd, uid, gid)
                os.fchmod(ffd, mode)
            result = _result(bool(wrong), full, created, wrong)
        if keep_before:
            result["before"] = before
        return result


def read_file(path: str) -> bytes:
    """What the regular file (one link) at path holds, found by the walk's rules."""
    with _at_leaf(path, True) as (fd, leaf, where, full, st, fds, _created):
        if st is None:
            raise ServicePathError(f"{full} does not exist; nothing to copy from")
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            _refuse(full, _what(st, fd, leaf), where, os.fstat(fd), "a regular file")
        ffd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        fds.append(ffd)
        fst = os.fstat(ffd)
        if not stat.S_ISREG(fst.st_mode) or fst.st_nlink != 1:
            _refuse(full, _what(fst, fd, leaf), where, os.fstat(fd), "a regular file")
        return _read_all(ffd, fst.st_size + 1)


def remove_file(path: str, check: bool = False) -> dict[str, Any]:
    """Remove the file or link at path (the link itself: the leaf is never followed, its
    directory is found by the walk's rules); a directory there is refused."""
    parent, leaf = os.path.split(os.path.normpath(path))
    with _at_leaf(parent, True) as (fd, name, where, full, st, fds, _created):
        if st is None or not stat.S_ISDIR(st.st_mode):
            return _result(False, os.path.join(full, leaf), [], [])
        dfd = _open_dir(fd, name, full, where)
        fds.append(dfd)
        target = _lstat(dfd, leaf)
        if target is None:
            return _result(False, os.path.join(full, leaf), [], [])
        if stat.S_ISDIR(target.st_mode):
            _refuse(
                os.path.join(full, leaf), "a directory", full, os.fstat(dfd), "a file to remove"
            )
        if not check:
            os.unlink(leaf, dir_fd=dfd)
        return _result(True, os.path.join(full, leaf), [], ["removed"])


def _require_root_dir(fd: int, where: str) -> None:
    st = os.fstat(fd)
    if not _trusted(st):
        raise ServicePathError(
            f"{where} is owned by {_owner_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}: "
            "root keeps this file only in a directory no other account can change. Look at what "
            f"made it so, make it root's and writable by root alone (chown root:root {where}; "
            f"chmod go-w {where}), and run again."
        )


def _read_all(fd: int, limit: int) -> bytes:
    chunks = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _replace(fd: int, leaf: str, content: bytes, uid: int, gid: int, mode: int) -> None:
    """leaf in directory fd becomes a new file holding content (replace_file)."""

    def fill(tfd: int) -> None:
        view = memoryview(content)
        while view:
            view = view[os.write(tfd, view) :]

    replace_file(fd, leaf, fill, uid, gid, mode)


def replace_file(fd: int, leaf: str, fill, uid: int, gid: int, mode: int, tag: str = "gpuhost"):
    """Write a new file beside leaf (O_EXCL|O_NOFOLLOW: never an existing entry) through
    fill(file descriptor), which may raise to abandon it; then give it uid, gid and mode, sync
    it and rename it over leaf, so no file that was there, or is linked from elsewhere, is
    written. On any failure the new file is removed and leaf is left as it was."""
    tmp = f".{leaf}.{tag}-{secrets.token_hex(6)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    tfd = os.open(tmp, flags, 0o600, dir_fd=fd)
    try:
        fill(tfd)
        os.fchown(tfd, uid, gid)
        os.fchmod(tfd, mode)
        os.fsync(tfd)
        os.rename(tmp, leaf, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)
        raise
    finally:
        os.close(tfd)
