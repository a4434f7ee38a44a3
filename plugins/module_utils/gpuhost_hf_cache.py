# Copyright: gpuhost contributors
# Apache-2.0
"""A Hugging Face hub cache read by root without following anything its owner can change:
the read half of adopting one (gpuhost_hf_cache_adopt.py, the module `hf_cache_adopt`).

The hub cache layout (https://huggingface.co/docs/hub/local-cache): models--OWNER--NAME/
blobs/<etag> holds each file once, named by its etag: the sha256 of the content for an LFS
file (64 hex), the git blob sha1 (sha1 of b"blob <len>\\0" + content, 40 hex) for a regular
git file; snapshots/<commit>/<path> is a relative link ../../blobs/<etag>; refs/<branch>
holds the commit a branch or tag is at. So each blob verifies itself: no hub is needed.

The source belongs to a user (the account of a hand-started server), so:
- the path to it is opened by gpuhost_service_path's walk (a link only when root's, in a
  directory only root can change); below it every directory is opened with O_NOFOLLOW on
  the descriptor of its parent (subdir), and any link there is refused;
- a snapshot entry is read with lstat/readlink, never followed: only ../(depth+2)blobs/<etag>
  is accepted (snapshot_files);
- a blob must be a regular file of the expected user (source_blob), opened with
  O_NOFOLLOW|O_NONBLOCK and fstat'ed again: the same inode as the lstat (open_source_blob);
- a ref is read only from a regular file, and must be a commit sha (commit_of).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import pwd
import re
import stat
from typing import Any

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (
    ServicePathError,
    opened_directory,
)

COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 8 << 20
_MAX_DEPTH = 32
COPY_CHOICES = ("auto", "always")


class AdoptError(Exception):
    """Nothing can be adopted: bad options or a source root must not read."""


class FileError(Exception):
    """One file cannot be adopted; the message names it."""


class Missing(FileError):
    """A directory on the way does not exist."""


def blob_hasher(name: str, size: int):
    """The hash a blob named `name` must have: sha256 (LFS) or git's blob sha1; None when
    the name is neither (not a hub blob)."""
    if _SHA256.fullmatch(name):
        return hashlib.sha256()
    if COMMIT.fullmatch(name):
        return hashlib.sha1(b"blob %d\0" % size)  # git's object id, not a security use
    return None


def path_error(path: Any) -> str:
    """'' when path is a file path inside a repository, else what is wrong with it."""
    if not isinstance(path, str) or not path:
        return "not a path"
    if path.startswith("/"):
        return "an absolute path"
    if _CONTROL.search(path):
        return "a NUL or control character in it"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "an empty, '.' or '..' component"
    return ""


def validate(params: dict) -> list[str]:
    """Errors for the module's options, each naming the option, the value and what is allowed."""
    errors = []

    def bad(name, allowed):
        errors.append(f"{name}: got {params.get(name)!r}; allowed: {allowed}")

    for name in ("source", "dest"):
        value = params.get(name)
        if (
            not isinstance(value, str)
            or not value.startswith("/")
            or _CONTROL.search(value)
            or any(part in (".", "..") for part in value.split("/"))
        ):
            bad(name, "an absolute path without '.' or '..' (a hub cache directory, .../hub)")
    if not _REPO_ID.fullmatch(str(params.get("repo_id") or "")):
        bad("repo_id", "a Hugging Face repo id owner/name of letters, digits, '.', '_', '-'")
    revision = str(params.get("revision") or "")
    if not _REVISION.fullmatch(revision) or len(revision) > 128:
        bad("revision", "a commit sha (40 hex) or a branch or tag name (letters, digits, . _ - /)")
    for name in ("owner", "group", "source_owner"):
        if not _USER.fullmatch(str(params.get(name) or "")):
            bad(name, "a user or group name ([a-z_][a-z0-9_-]*, at most 32 characters)")
    if params.get("copy") not in COPY_CHOICES:
        bad("copy", " or ".join(COPY_CHOICES))
    for name in ("dir_mode", "file_mode"):
        if not re.fullmatch(r"0?[0-7]{3}", str(params.get(name) or "")):
            bad(name, "an octal mode such as '0750'")
    if not errors and int(str(params["file_mode"]), 8) & 0o222:
        bad(
            "file_mode", "a read-only mode (no w bit, e.g. '0444'): adopted blobs are never written"
        )
    expected = params.get("expected_files") or {}
    if not isinstance(expected, dict):
        bad("expected_files", "a mapping path -> {size, sha256 (LFS files)}")
        return errors
    for path, meta in expected.items():
        why = path_error(path)
        meta = meta if isinstance(meta, dict) else {}
        size, sha = meta.get("size"), meta.get("sha256")
        if why:
            errors.append(f"expected_files: path {path!r}: {why}; allowed: a relative path")
        elif not isinstance(size, int) or size < 0:
            errors.append(f"expected_files: {path}: size {size!r}; allowed: bytes (an integer)")
        elif sha is not None and not _SHA256.fullmatch(str(sha)):
            errors.append(f"expected_files: {path}: sha256 {sha!r}; allowed: 64 hex digits")
    return errors


def kind(st: os.stat_result) -> str:
    mode = st.st_mode
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "a device node"


def subdir(fd: int, name: str, where: str) -> int:
    """Open directory `name` under fd without following anything; a link is refused."""
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except FileNotFoundError:
        raise Missing(f"{where}/{name} does not exist") from None
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise FileError(f"{where}/{name}: {err.strerror}") from None
        found = kind(os.lstat(name, dir_fd=fd))
        raise FileError(
            f"{where}/{name} is {found}, not a directory: root follows no link in a cache "
            "another account can change"
        ) from None


def commit_of(repo_fd: int, revision: str, where: str) -> str:
    """The commit of revision: itself when a sha, else refs/<revision> (a regular file)."""
    if COMMIT.fullmatch(revision):
        return revision
    parts = ["refs", *revision.split("/")]
    fds = []
    try:
        fd = repo_fd
        for part in parts[:-1]:
            fd = subdir(fd, part, where)
            fds.append(fd)
            where = f"{where}/{part}"
        try:
            rfd = os.open(parts[-1], _FILE, dir_fd=fd)
        except OSError:
            raise FileError(
                f"{where}/{parts[-1]}: no such ref (or not a regular file); the source cache "
                f"does not know revision {revision!r}"
            ) from None
        fds.append(rfd)
        regular = stat.S_ISREG(os.fstat(rfd).st_mode)
        text = os.read(rfd, 128).decode("ascii", "replace").strip() if regular else ""
        if not COMMIT.fullmatch(text):
            raise FileError(f"{where}/{parts[-1]} does not hold a commit sha (40 hex)")
        return text
    finally:
        for opened in fds:
            os.close(opened)


def snapshot_files(
    fd: int, where: str, files: dict, errors: list, prefix: str = "", depth: int = 0
):
    """{path: blob name} of a snapshot directory: links ../(depth+2)blobs/<etag> only."""
    if depth > _MAX_DEPTH:
        errors.append({"path": prefix, "error": f"{where}: deeper than {_MAX_DEPTH} levels"})
        return
    for name in sorted(os.listdir(fd)):
        rel = prefix + name
        st = os.lstat(name, dir_fd=fd)
        if path_error(rel):
            errors.append({"path": rel, "error": f"{where}/{name}: {path_error(rel)}"})
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=fd)
            lead = "../" * (depth + 2) + "blobs/"
            blob = target[len(lead) :] if target.startswith(lead) else ""
            if blob_hasher(blob, 0) is None:
                errors.append(
                    {
                        "path": rel,
                        "error": f"{where}/{name} links to {target!r}; allowed: {lead}<etag> "
                        "(sha256 or git sha1), as the hub writes it: root follows nothing else",
                    }
                )
            else:
                files[rel] = blob
        elif stat.S_ISDIR(st.st_mode):
            try:
                sub = subdir(fd, name, where)
            except FileError as err:
                errors.append({"path": rel, "error": str(err)})
                continue
            try:
                snapshot_files(sub, f"{where}/{name}", files, errors, rel + "/", depth + 1)
            finally:
                os.close(sub)
        else:
            errors.append(
                {"path": rel, "error": f"{where}/{name} is {kind(st)}, not a link into blobs/"}
            )


def hash_fd(fd: int, name: str, size: int) -> tuple[bool, int]:
    """Does the content behind fd hash to its blob name; and its length."""
    hasher = blob_hasher(name, size)
    os.lseek(fd, 0, os.SEEK_SET)
    total = 0
    while chunk := os.read(fd, _CHUNK):
        hasher.update(chunk)
        total += len(chunk)
    return total == size and hasher.hexdigest() == name, total


def open_source_blob(blobs_fd: int, name: str, lst: os.stat_result) -> int:
    fd = os.open(name, _FILE, dir_fd=blobs_fd)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino, st.st_uid) != (lst.st_dev, lst.st_ino, lst.st_uid):
        os.close(fd)
        raise FileError(f"blobs/{name} was replaced while it was read; nothing adopted from it")
    return fd


def mismatch(name: str, got: int) -> str:
    kind = "sha256" if _SHA256.fullmatch(name) else "git blob sha1"
    return (
        f"blobs/{name}: the {kind} of its {got} bytes is not its name (corrupt, truncated or "
        "changed): refused. Fix: remove it from the source cache and download that file again"
    )


def source_blob(blobs_fd: int, name: str, source_uid: int, source_owner: str) -> os.stat_result:
    try:
        lst = os.lstat(name, dir_fd=blobs_fd)
    except FileNotFoundError:
        raise FileError(
            f"blobs/{name} is missing from the source (an interrupted download?)"
        ) from None
    if not stat.S_ISREG(lst.st_mode):
        raise FileError(f"blobs/{name} is {kind(lst)}, not a regular file: refused")
    if lst.st_uid != source_uid:
        try:
            who = pwd.getpwuid(lst.st_uid).pw_name
        except KeyError:
            who = str(lst.st_uid)
        raise FileError(
            f"blobs/{name} is owned by {who}, not {source_owner}: root adopts only the source "
            "user's own files. Fix: find out how it got there; download that file again"
        )
    return lst


def lstat_rel(fd: int | None, rel: str, where: str) -> os.stat_result | None:
    """lstat of rel under the directory fd (directories opened without following), or None."""
    if fd is None:
        return None
    parts = rel.split("/")
    opened = []
    try:
        for part in parts[:-1]:
            try:
                fd = subdir(fd, part, where)
            except Missing:
                return None
            opened.append(fd)
            where = f"{where}/{part}"
        try:
            return os.lstat(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            return None
    finally:
        for each in opened:
            os.close(each)


def readlink_rel(fd: int, rel: str, where: str) -> str:
    """The target of the link rel under the directory fd (directories opened without following)."""
    parts = rel.split("/")
    opened = []
    try:
        for part in parts[:-1]:
            fd = subdir(fd, part, where)
            opened.append(fd)
            where = f"{where}/{part}"
        return os.readlink(parts[-1], dir_fd=fd)
    finally:
        for each in opened:
            os.close(each)


def expected_errors(files: dict, sizes: dict, expected: dict) -> list[dict]:
    """The snapshot against the revision's file list (the hub's ?blobs=true or a lock)."""
    errors = []
    for path in sorted(set(expected) - set(files)):
        errors.append(
            {
                "path": path,
                "error": f"{path} is in the revision's file list but not in the "
                "source snapshot (an incomplete download): nothing adopted",
            }
        )
    for path, blob in sorted(files.items()):
        meta = expected.get(path)
        if meta is None:
            errors.append(
                {
                    "path": path,
                    "error": f"{path} is in the source snapshot but not in the "
                    "revision's file list: refused",
                }
            )
        elif blob in sizes and sizes[blob] != meta["size"]:
            errors.append(
                {
                    "path": path,
                    "error": f"{path} (blobs/{blob}) has {sizes[blob]} bytes, the "
                    f"revision's file list says {meta['size']}: refused",
                }
            )
        elif meta.get("sha256") and meta["sha256"] != blob:
            errors.append(
                {
                    "path": path,
                    "error": f"{path} links to blobs/{blob}, the revision's file "
                    f"list says sha256 {meta['sha256']}: refused",
                }
            )
    return errors


def enter(stack: contextlib.ExitStack, fd: int) -> int:
    stack.callback(os.close, fd)
    return fd


def open_source(stack, params: dict, folder: str) -> tuple[int, str, int]:
    """(repo fd, commit, snapshot fd) of the source, every directory opened without a link."""
    source = params["source"].rstrip("/") or "/"
    try:
        hub, _result = stack.enter_context(opened_directory(source))
    except ServicePathError as err:
        raise AdoptError(
            f"source: {err}. Give model_cache_adopt_from as the real path (readlink -f): root "
            "follows no link another account can change"
        ) from None
    where = f"{source}/{folder}"
    try:
        repo = enter(stack, subdir(hub, folder, source))
        commit = commit_of(repo, params["revision"], where)
        snaps = enter(stack, subdir(repo, "snapshots", where))
        try:
            snap = enter(stack, subdir(snaps, commit, f"{where}/snapshots"))
        except FileError as err:
            have = ", ".join(sorted(os.listdir(snaps))[:8]) or "none"
            raise FileError(
                f"{err} (the source has snapshots: {have}; to serve what the old server "
                "serves, set model_cache_revision, or its pin in the models lock, to one of them)"
            ) from None
    except FileError as err:
        raise AdoptError(f"source: {err}") from None
    return repo, commit, snap
