# Copyright: gpuhost contributors
# Apache-2.0
"""Adopt one revision of a user's Hugging Face hub cache into the managed cache, downloading
nothing. The logic of the module `hf_cache_adopt`; it runs as root on the host.

The hub cache layout (https://huggingface.co/docs/hub/local-cache): models--OWNER--NAME/
blobs/<etag> holds each file once, named by its etag: the sha256 of the content for an LFS
file (64 hex), the git blob sha1 (sha1 of b"blob <len>\\0" + content, 40 hex) for a regular
git file; snapshots/<commit>/<path> is a relative link ../../blobs/<etag>; refs/<branch>
holds the commit a branch or tag is at. So each blob verifies itself: no hub is needed.

The source belongs to a user (the account of a hand-started server); root never follows,
executes, chowns or copies back anything that account can change:
- the source hub dir is opened by gpuhost_service_path's walk (a link only when root's, in
  a directory only root can change); below it every directory is opened with O_NOFOLLOW on
  the descriptor of its parent, and any link there is refused;
- a snapshot entry is read with lstat/readlink: only ../(depth+2)blobs/<etag> is accepted;
- a blob must be a regular file owned by the expected source user; it is opened with
  O_NOFOLLOW|O_NONBLOCK and fstat'ed again (same inode as the lstat);
- hard link (copy: auto, one filesystem): only a blob with one name. It is linked under a
  temporary name, opened, checked to be that inode with exactly two names, then chowned to
  the managed owner and made read-only through that descriptor, and only THEN hashed (the
  user can no longer write it, so what was hashed is what stays), then renamed into place.
  On a mismatch its owner and mode are put back and the temporary name removed;
- copy (copy: always, another filesystem): read into an O_EXCL temporary file in the
  destination's blobs/, hashed while copied, fsynced, renamed into place only on a match;
- a blob already in the destination is hashed and reused; the snapshot's links and the ref
  are written only when every file of the revision verified, so no revision is ever half
  there (blobs that verified stay: content-addressed, a re-run or `hf download` reuses them).
Nothing in the source is deleted or changed, but for the owner and mode of a linked blob
(one inode under two names), which the result reports. The destination is the service
account's: its directories are made and opened with gpuhost_service_path, never through a
link it left there.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import os
import pwd
import re
import secrets
import stat
from typing import Any

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (
    ServicePathError,
    opened_directory,
    write_file,
)

COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 8 << 20
_MAX_DEPTH = 32
COPY_CHOICES = ("auto", "always")


class AdoptError(Exception):
    """Nothing can be adopted: bad options or a source root must not read."""


class _FileError(Exception):
    """One file cannot be adopted; the message names it."""


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


def _ids(owner: str, group: str, source_owner: str, check: bool):
    """uid, gid (None in check mode when role base has not made them yet), source uid."""
    try:
        source_uid = pwd.getpwnam(source_owner).pw_uid
    except KeyError:
        raise AdoptError(
            f"source_owner: no user {source_owner!r} on the host; allowed: the account the "
            "old server runs as, which owns the source cache"
        ) from None
    ids = []
    for what, name, lookup in (("owner", owner, pwd.getpwnam), ("group", group, grp.getgrnam)):
        try:
            ids.append(lookup(name)[2])
        except KeyError:
            if not check:
                raise AdoptError(f"{what}: no such account {name!r} on the host") from None
            ids.append(None)
    return ids[0], ids[1], source_uid


def _kind(st: os.stat_result) -> str:
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


def _subdir(fd: int, name: str, where: str) -> int:
    """Open directory `name` under fd without following anything; a link is refused."""
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except FileNotFoundError:
        raise _FileError(f"{where}/{name} does not exist") from None
    except OSError:
        found = _kind(os.lstat(name, dir_fd=fd))
        raise _FileError(
            f"{where}/{name} is {found}, not a directory: root follows no link in a cache "
            "another account can change"
        ) from None


def _commit(repo_fd: int, revision: str, where: str) -> str:
    """The commit of revision: itself when a sha, else refs/<revision> (a regular file)."""
    if COMMIT.fullmatch(revision):
        return revision
    parts = ["refs", *revision.split("/")]
    fds = []
    try:
        fd = repo_fd
        for part in parts[:-1]:
            fd = _subdir(fd, part, where)
            fds.append(fd)
            where = f"{where}/{part}"
        try:
            rfd = os.open(parts[-1], _FILE, dir_fd=fd)
        except OSError:
            raise _FileError(
                f"{where}/{parts[-1]}: no such ref (or not a regular file); the source cache "
                f"does not know revision {revision!r}"
            ) from None
        fds.append(rfd)
        text = os.read(rfd, 128).decode("ascii", "replace").strip()
        if not stat.S_ISREG(os.fstat(rfd).st_mode) or not COMMIT.fullmatch(text):
            raise _FileError(f"{where}/{parts[-1]} does not hold a commit sha (40 hex)")
        return text
    finally:
        for opened in fds:
            os.close(opened)


def _snapshot(fd: int, where: str, files: dict, errors: list, prefix: str = "", depth: int = 0):
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
                sub = _subdir(fd, name, where)
            except _FileError as err:
                errors.append({"path": rel, "error": str(err)})
                continue
            try:
                _snapshot(sub, f"{where}/{name}", files, errors, rel + "/", depth + 1)
            finally:
                os.close(sub)
        else:
            errors.append(
                {"path": rel, "error": f"{where}/{name} is {_kind(st)}, not a link into blobs/"}
            )


def _hash(fd: int, name: str, size: int) -> tuple[bool, int]:
    """Does the content behind fd hash to its blob name; and its length."""
    hasher = blob_hasher(name, size)
    os.lseek(fd, 0, os.SEEK_SET)
    total = 0
    while chunk := os.read(fd, _CHUNK):
        hasher.update(chunk)
        total += len(chunk)
    return total == size and hasher.hexdigest() == name, total


def _open_source_blob(blobs_fd: int, name: str, lst: os.stat_result) -> int:
    fd = os.open(name, _FILE, dir_fd=blobs_fd)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino, st.st_uid) != (lst.st_dev, lst.st_ino, lst.st_uid):
        os.close(fd)
        raise _FileError(f"blobs/{name} was replaced while it was read; nothing adopted from it")
    return fd


def _link(src: int, dst: int, name: str, lst: os.stat_result, ids: tuple, mode: int) -> None:
    """Hard link blob `name`, make it the managed owner's and read-only, then verify it."""
    tmp = f".{name}.gpuhost-adopt-{secrets.token_hex(6)}"
    os.link(name, tmp, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
    fd = None
    try:
        fd = os.open(tmp, _FILE, dir_fd=dst)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino, st.st_uid, st.st_nlink) != (
            lst.st_dev,
            lst.st_ino,
            lst.st_uid,
            2,
        ) or not stat.S_ISREG(st.st_mode):
            raise _FileError(f"blobs/{name} changed while it was linked; nothing adopted from it")
        os.fchown(fd, *ids)
        os.fchmod(fd, mode)
        ok, got = _hash(fd, name, st.st_size)
        if not ok:
            os.fchown(fd, lst.st_uid, lst.st_gid)
            os.fchmod(fd, stat.S_IMODE(lst.st_mode))
            raise _FileError(_mismatch(name, got))
        os.rename(tmp, name, src_dir_fd=dst, dst_dir_fd=dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dst)
        raise
    finally:
        if fd is not None:
            os.close(fd)


def _copy(src: int, dst: int, name: str, lst: os.stat_result, ids: tuple, mode: int) -> None:
    """Copy blob `name` into a new file, hashing while copying; in place only on a match."""
    sfd = _open_source_blob(src, name, lst)
    tmp = f".{name}.gpuhost-adopt-{secrets.token_hex(6)}"
    tfd = None
    try:
        tfd = os.open(tmp, _NEW, 0o600, dir_fd=dst)
        hasher = blob_hasher(name, lst.st_size)
        total = 0
        while chunk := os.read(sfd, _CHUNK):
            hasher.update(chunk)
            total += len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(tfd, view) :]
        if total != lst.st_size or hasher.hexdigest() != name:
            raise _FileError(_mismatch(name, total))
        os.fchown(tfd, *ids)
        os.fchmod(tfd, mode)
        os.fsync(tfd)
        os.rename(tmp, name, src_dir_fd=dst, dst_dir_fd=dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dst)
        raise
    finally:
        os.close(sfd)
        if tfd is not None:
            os.close(tfd)


def _mismatch(name: str, got: int) -> str:
    kind = "sha256" if _SHA256.fullmatch(name) else "git blob sha1"
    return (
        f"blobs/{name}: the {kind} of its {got} bytes is not its name (corrupt, truncated or "
        "changed): refused. Fix: remove it from the source cache and download that file again"
    )


def _source_blob(blobs_fd: int, name: str, source_uid: int, source_owner: str) -> os.stat_result:
    try:
        lst = os.lstat(name, dir_fd=blobs_fd)
    except FileNotFoundError:
        raise _FileError(
            f"blobs/{name} is missing from the source (an interrupted download?)"
        ) from None
    if not stat.S_ISREG(lst.st_mode):
        raise _FileError(f"blobs/{name} is {_kind(lst)}, not a regular file: refused")
    if lst.st_uid != source_uid:
        try:
            who = pwd.getpwuid(lst.st_uid).pw_name
        except KeyError:
            who = str(lst.st_uid)
        raise _FileError(
            f"blobs/{name} is owned by {who}, not {source_owner}: root adopts only the source "
            "user's own files. Fix: find out how it got there; download that file again"
        )
    return lst


def _lstat_rel(fd: int | None, rel: str, where: str) -> os.stat_result | None:
    """lstat of rel under the directory fd (directories opened without following), or None."""
    if fd is None:
        return None
    parts = rel.split("/")
    opened = []
    try:
        for part in parts[:-1]:
            try:
                fd = _subdir(fd, part, where)
            except _FileError as err:
                if "does not exist" in str(err):
                    return None
                raise
            opened.append(fd)
            where = f"{where}/{part}"
        try:
            return os.lstat(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            return None
    finally:
        for each in opened:
            os.close(each)


def _device(fd: int | None, path: str) -> int:
    """st_dev of the directory fd, or of the nearest existing ancestor of path (check mode)."""
    if fd is not None:
        return os.fstat(fd).st_dev
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return os.stat(path).st_dev


def _expected_errors(files: dict, sizes: dict, expected: dict) -> list[dict]:
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


def _enter(stack: contextlib.ExitStack, fd: int) -> int:
    stack.callback(os.close, fd)
    return fd


def _open_source(stack, params: dict, folder: str) -> tuple[int, str, int]:
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
        repo = _enter(stack, _subdir(hub, folder, source))
        commit = _commit(repo, params["revision"], where)
        snaps = _enter(stack, _subdir(repo, "snapshots", where))
        try:
            snap = _enter(stack, _subdir(snaps, commit, f"{where}/snapshots"))
        except _FileError as err:
            have = ", ".join(sorted(os.listdir(snaps))[:8]) or "none"
            raise _FileError(f"{err} (the source has snapshots: {have})") from None
    except _FileError as err:
        raise AdoptError(f"source: {err}") from None
    return repo, commit, snap


def adopt(params: dict, check: bool = False) -> dict[str, Any]:
    """Adopt params["revision"] of params["repo_id"] from the hub cache params["source"] into
    params["dest"]. The result: what was (would be) linked, copied and reused, the bytes each
    way, the commit, the source blobs whose owner and mode changed, and per-file errors."""
    errors = validate(params)
    if errors:
        raise AdoptError("; ".join(errors))
    uid, gid, source_uid = _ids(params["owner"], params["group"], params["source_owner"], check)
    dir_mode, file_mode = int(params["dir_mode"], 8), int(params["file_mode"], 8)
    folder = "models--" + params["repo_id"].replace("/", "--")
    dest_repo = f"{params['dest'].rstrip('/')}/{folder}"
    result: dict[str, Any] = {"changed": False, "repo_id": params["repo_id"]}
    result.update(revision=params["revision"], linked=[], copied=[], reused=[], errors=[])
    result.update(bytes_linked=0, bytes_copied=0, bytes_reused=0, source_changed=[])
    with contextlib.ExitStack() as stack:
        _repo, commit, snap = _open_source(stack, params, folder)
        result["commit"] = commit
        files: dict[str, str] = {}
        _snapshot(snap, f"{params['source']}/{folder}/snapshots/{commit}", files, result["errors"])
        result["files"] = len(files)
        try:
            blobs = _enter(stack, _subdir(_repo, "blobs", f"{params['source']}/{folder}"))
        except _FileError as err:
            raise AdoptError(f"source: {err}") from None

        def ensure(path):
            return stack.enter_context(
                opened_directory(path, params["owner"], params["group"], dir_mode, check)
            )

        for path in (params["dest"], dest_repo, f"{dest_repo}/snapshots"):
            _fd, made = ensure(path)
            result["changed"] |= made["changed"]
        dst_blobs, made = ensure(f"{dest_repo}/blobs")
        result["changed"] |= made["changed"]
        same_fs = os.fstat(blobs).st_dev == _device(dst_blobs, f"{dest_repo}/blobs")
        plan, sizes = {}, {}
        for blob in sorted(set(files.values())):
            paths = ", ".join(sorted(p for p, b in files.items() if b == blob))
            try:
                there = _lstat_rel(dst_blobs, blob, f"{dest_repo}/blobs")
                if there is not None and not stat.S_ISREG(there.st_mode):
                    raise _FileError(
                        f"{dest_repo}/blobs/{blob} is {_kind(there)}: root does not follow or "
                        f"reuse it. Fix: remove it (rm {dest_repo}/blobs/{blob}) and run again"
                    )
                # Already there (an earlier run linked it: the source's is the same inode,
                # now the service account's): verified and reused, the source not read.
                lst = there or _source_blob(blobs, blob, source_uid, params["source_owner"])
                sizes[blob] = lst.st_size
                if there is not None:
                    plan[blob] = ("reuse", lst)
                elif same_fs and params["copy"] == "auto":
                    if lst.st_nlink != 1:
                        raise _FileError(
                            f"blobs/{blob} has {lst.st_nlink} names: root hard links only a "
                            "blob with one (another name is one the user, or another account, "
                            "controls). Fix: remove its other names, or set copy: always"
                        )
                    plan[blob] = ("link", lst)
                else:
                    plan[blob] = ("copy", lst)
            except _FileError as err:
                result["errors"].append({"path": paths, "blob": blob, "error": str(err)})
        if params.get("expected_files"):
            result["errors"] += _expected_errors(files, sizes, params["expected_files"])
        snap_dir = f"{dest_repo}/snapshots/{commit}"
        dst_snap = None if dst_blobs is None else _maybe_open(stack, snap_dir)
        for path, blob in sorted(files.items()):
            there = _lstat_rel(dst_snap, path, snap_dir)
            want = "../" * (path.count("/") + 2) + "blobs/" + blob
            if there is not None and not (
                stat.S_ISLNK(there.st_mode) and _readlink(dst_snap, path) == want
            ):
                result["errors"].append(
                    {
                        "path": path,
                        "error": f"{snap_dir}/{path} is {_kind(there)}, not the link "
                        f"{want} the adopted revision needs. Fix: remove it and run again",
                    }
                )
        if result["errors"]:
            return result
        _blobs(plan, blobs, dst_blobs, (uid, gid), file_mode, check, params, result)
        if result["errors"] or check:
            result["changed"] |= bool(result["linked"] or result["copied"])
            return result
        _links(files, dest_repo, commit, params, dir_mode, uid, gid, result)
        _ref(dest_repo, commit, params, dir_mode, result)
    return result


def _maybe_open(stack, path: str) -> int | None:
    try:
        fd, _made = stack.enter_context(opened_directory(path))
    except ServicePathError:
        return None
    return fd


def _readlink(fd: int, rel: str) -> str:
    parent, _sep, leaf = rel.rpartition("/")
    sub = os.open(parent, _DIR, dir_fd=fd) if parent else os.dup(fd)
    try:
        return os.readlink(leaf, dir_fd=sub)
    finally:
        os.close(sub)


def _verify_reused(dst: int, blob: str, params: dict) -> None:
    """A blob already in the managed cache: a regular file whose content is its name."""
    fd = os.open(blob, _FILE, dir_fd=dst)
    try:
        st = os.fstat(fd)
        ok = stat.S_ISREG(st.st_mode) and _hash(fd, blob, st.st_size)[0]
    finally:
        os.close(fd)
    if not ok:
        raise _FileError(
            f"blobs/{blob} in the managed cache ({params['dest']}) does not match its name. "
            "Fix: remove it and run again"
        )


def _blobs(plan, src, dst, ids, mode, check, params, result) -> None:
    """Link, copy or reuse each blob; a failure is that file's error, the others go on."""
    for blob, (how, lst) in sorted(plan.items()):
        try:
            if how == "reuse" and not check:
                _verify_reused(dst, blob, params)
            elif how == "link" and not check:
                try:
                    _link(src, dst, blob, lst, ids, mode)
                except OSError as err:
                    if err.errno != 18:  # EXDEV: another filesystem after all (a bind mount)
                        raise
                    how = "copy"
                    _copy(src, dst, blob, lst, ids, mode)
                else:
                    result["source_changed"].append(
                        {
                            "blob": blob,
                            "owner": f"{params['source_owner']} -> {params['owner']}",
                            "mode": f"{stat.S_IMODE(lst.st_mode):04o} -> {mode:04o}",
                        }
                    )
            elif how == "copy" and not check:
                _copy(src, dst, blob, lst, ids, mode)
        except _FileError as err:
            result["errors"].append({"blob": blob, "error": str(err)})
            continue
        except OSError as err:
            result["errors"].append({"blob": blob, "error": f"blobs/{blob}: {err.strerror}"})
            continue
        key = {"reuse": "reused", "link": "linked", "copy": "copied"}[how]
        result[key].append(blob)
        result[f"bytes_{key}"] += lst.st_size


def _links(files, dest_repo, commit, params, dir_mode, uid, gid, result) -> None:
    """snapshots/<commit>/<path> -> ../../blobs/<etag>, as the hub library writes them."""
    snap_dir = f"{dest_repo}/snapshots/{commit}"
    for path, blob in sorted(files.items()):
        parent, _sep, leaf = path.rpartition("/")
        for sub in _parents(snap_dir, parent):
            with opened_directory(sub, params["owner"], params["group"], dir_mode) as (_fd, made):
                result["changed"] |= made["changed"]
        where = f"{snap_dir}/{parent}" if parent else snap_dir
        with opened_directory(where) as (fd, _made):
            want = "../" * (path.count("/") + 2) + "blobs/" + blob
            try:
                os.symlink(want, leaf, dir_fd=fd)
            except FileExistsError:
                if os.readlink(leaf, dir_fd=fd) != want:
                    raise AdoptError(f"{where}/{leaf} changed while adopting; run again") from None
                continue
            os.chown(leaf, uid, gid, dir_fd=fd, follow_symlinks=False)
            result["changed"] = True


def _parents(snap_dir: str, parent: str) -> list[str]:
    paths = [snap_dir]
    for part in parent.split("/") if parent else []:
        paths.append(f"{paths[-1]}/{part}")
    return paths


def _ref(dest_repo, commit, params, dir_mode, result) -> None:
    """refs/<branch or tag> holding the commit; nothing for a revision that is a sha."""
    revision = params["revision"]
    if COMMIT.fullmatch(revision):
        return
    parent = f"{dest_repo}/refs"
    for part in ["", *revision.split("/")[:-1]]:
        parent = f"{parent}/{part}" if part else parent
        with opened_directory(parent, params["owner"], params["group"], dir_mode) as (_fd, made):
            result["changed"] |= made["changed"]
    made = write_file(
        f"{dest_repo}/refs/{revision}", commit.encode(), params["owner"], params["group"], 0o640
    )
    result["changed"] |= made["changed"]
