# Copyright: gpuhost contributors
# Apache-2.0
"""Adopt one revision of a user's Hugging Face hub cache into the managed cache, downloading
nothing: the write half of the module `hf_cache_adopt` (run as root on the host). The source
is read by gpuhost_hf_cache.py, which follows nothing the user can change.

- Plan first, changing nothing: every blob of the revision is found in the managed cache
  (reused), or is the user's own single-name regular file on the same filesystem (hard
  linked, copy: auto), or is copied; any refusal stops here, before a change.
- Hard link: the blob is linked under a temporary name, opened, checked to be that inode with
  exactly two names and the user's, then chowned to the managed owner and made read-only
  through that descriptor, and only THEN hashed (the user can no longer write it, so what was
  hashed is what stays), then renamed into place. On a mismatch its owner and mode are put
  back and the temporary name removed.
- Copy: read into an O_EXCL temporary file in the managed blobs/, hashed while copied,
  fsynced, renamed into place only on a match.
- Reuse: a blob already in the managed cache is hashed again.
- The snapshot's links and the ref are written only when every file verified, so no revision
  is ever half there (the blobs that verified stay: content-addressed, a re-run or
  `hf download` reuses them). Nothing in the source is deleted or changed, but for the owner
  and mode of a linked blob (one inode under two names), which the result reports. The
  managed cache is the service account's: its directories are made and opened with
  gpuhost_service_path, never through a link it left there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import stat
from typing import Any

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hf_cache import (
    COMMIT,
    AdoptError,
    FileError,
    blob_hasher,
    enter,
    expected_errors,
    hash_fd,
    kind,
    lstat_rel,
    mismatch,
    open_source,
    open_source_blob,
    readlink_rel,
    snapshot_files,
    source_blob,
    subdir,
    validate,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (
    ServicePathError,
    account_ids,
    opened_directory,
    replace_file,
    write_file,
)

__all__ = ["AdoptError", "adopt"]

_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 8 << 20


def _ids(owner: str, group: str, source_owner: str, check: bool):
    """uid, gid (None in check mode when role base has not made them yet), source uid."""
    try:
        source_uid = pwd.getpwnam(source_owner).pw_uid
    except KeyError:
        raise AdoptError(
            f"source_owner: no user {source_owner!r} on the host; allowed: the account the "
            "old server runs as, which owns the source cache"
        ) from None
    try:
        uid, gid = account_ids(owner, group, check)
    except ServicePathError as exc:
        raise AdoptError(str(exc)) from None
    return uid, gid, source_uid


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
            raise FileError(f"blobs/{name} changed while it was linked; nothing adopted from it")
        os.fchown(fd, *ids)
        os.fchmod(fd, mode)
        ok, got = hash_fd(fd, name, st.st_size)
        if not ok:
            os.fchown(fd, lst.st_uid, lst.st_gid)
            os.fchmod(fd, stat.S_IMODE(lst.st_mode))
            raise FileError(mismatch(name, got))
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
    sfd = open_source_blob(src, name, lst)

    def fill(tfd: int) -> None:
        hasher = blob_hasher(name, lst.st_size)
        total = 0
        while chunk := os.read(sfd, _CHUNK):
            hasher.update(chunk)
            total += len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(tfd, view) :]
        if total != lst.st_size or hasher.hexdigest() != name:
            raise FileError(mismatch(name, total))

    try:
        replace_file(dst, name, fill, ids[0], ids[1], mode, tag="gpuhost-adopt")
    finally:
        os.close(sfd)


def _device(fd: int | None, path: str) -> int:
    """st_dev of the directory fd, or of the nearest existing ancestor of path (check mode)."""
    if fd is not None:
        return os.fstat(fd).st_dev
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return os.stat(path).st_dev


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
        _repo, commit, snap = open_source(stack, params, folder)
        result["commit"] = commit
        files: dict[str, str] = {}
        snapshot_files(
            snap, f"{params['source']}/{folder}/snapshots/{commit}", files, result["errors"]
        )
        result["files"] = len(files)
        try:
            blobs = enter(stack, subdir(_repo, "blobs", f"{params['source']}/{folder}"))
        except FileError as err:
            raise AdoptError(f"source: {err}") from None

        # The plan reads the managed cache as it is (nothing made yet, even in a real run).
        dst_blobs = _maybe_open(stack, f"{dest_repo}/blobs")
        same_fs = os.fstat(blobs).st_dev == _device(dst_blobs, f"{dest_repo}/blobs")
        plan, sizes = {}, {}
        for blob in sorted(set(files.values())):
            paths = ", ".join(sorted(p for p, b in files.items() if b == blob))
            try:
                there = lstat_rel(dst_blobs, blob, f"{dest_repo}/blobs")
                if there is not None and not stat.S_ISREG(there.st_mode):
                    raise FileError(
                        f"{dest_repo}/blobs/{blob} is {kind(there)}: root does not follow or "
                        f"reuse it. Fix: remove it (rm {dest_repo}/blobs/{blob}) and run again"
                    )
                # Already there (an earlier run linked it: the source's is the same inode,
                # now the service account's): verified and reused, the source not read.
                lst = there or source_blob(blobs, blob, source_uid, params["source_owner"])
                sizes[blob] = lst.st_size
                if there is not None:
                    plan[blob] = ("reuse", lst)
                elif same_fs and params["copy"] == "auto":
                    if lst.st_nlink != 1:
                        raise FileError(
                            f"blobs/{blob} has {lst.st_nlink} names: root hard links only a "
                            "blob with one (another name is one the user, or another account, "
                            "controls). Fix: remove its other names, or set copy: always"
                        )
                    plan[blob] = ("link", lst)
                else:
                    plan[blob] = ("copy", lst)
            except FileError as err:
                result["errors"].append({"path": paths, "blob": blob, "error": str(err)})
        if params.get("expected_files"):
            result["errors"] += expected_errors(files, sizes, params["expected_files"])
        snap_dir = f"{dest_repo}/snapshots/{commit}"
        dst_snap = _maybe_open(stack, snap_dir)
        for path, blob in sorted(files.items()):
            there = lstat_rel(dst_snap, path, snap_dir)
            result["changed"] |= there is None  # a link to write
            want = "../" * (path.count("/") + 2) + "blobs/" + blob
            if there is not None and not (
                stat.S_ISLNK(there.st_mode) and readlink_rel(dst_snap, path, snap_dir) == want
            ):
                result["errors"].append(
                    {
                        "path": path,
                        "error": f"{snap_dir}/{path} is {kind(there)}, not the link "
                        f"{want} the adopted revision needs. Fix: remove it and run again",
                    }
                )
        if result["errors"]:
            return result  # refused before any change
        if check:
            result["changed"] |= any(how != "reuse" for how, _lst in plan.values())
            _blobs(plan, blobs, None, (uid, gid), file_mode, True, params, result)
            return result
        for path in (params["dest"], dest_repo, f"{dest_repo}/snapshots", f"{dest_repo}/blobs"):
            dst_blobs, made = stack.enter_context(
                opened_directory(path, params["owner"], params["group"], dir_mode)
            )
            result["changed"] |= made["changed"]
        _blobs(plan, blobs, dst_blobs, (uid, gid), file_mode, False, params, result)
        result["changed"] |= bool(result["linked"] or result["copied"])
        if result["errors"]:
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


def _verify_reused(dst: int, blob: str, params: dict) -> None:
    """A blob already in the managed cache: a regular file whose content is its name."""
    fd = os.open(blob, _FILE, dir_fd=dst)
    try:
        st = os.fstat(fd)
        ok = stat.S_ISREG(st.st_mode) and hash_fd(fd, blob, st.st_size)[0]
    finally:
        os.close(fd)
    if not ok:
        raise FileError(
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
                    if err.errno != errno.EXDEV:  # another filesystem after all (a bind mount)
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
        except FileError as err:
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
