"""Sizes under a Hugging Face cache repo and the free space for it: the pure half of modules
path_size and model_cache_state (one measure, two callers). Read-only; links are not followed
but a snapshot's to its blob (stat, no read), a ref is read only when it is a regular file."""

from __future__ import annotations

import os
import re
import stat

_COMMIT = re.compile(r"[0-9a-f]{40}")


def _commit_of(repo, revision):
    """The commit a revision names: itself when a sha, else its ref file's content."""
    if _COMMIT.fullmatch(revision):
        return revision
    if revision.startswith("/") or ".." in revision.split("/"):
        return ""  # a ref lies under refs/, nowhere else
    ref = os.path.join(repo, "refs", revision)
    try:
        # The ref is the service account's file: never open a FIFO or follow a link there.
        fd = os.open(ref, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        text = (
            os.read(fd, 64).decode("ascii", "replace").strip() if stat.S_ISREG(info.st_mode) else ""
        )
    finally:
        os.close(fd)
    return text if _COMMIT.fullmatch(text) else ""


def revision_bytes(repo, revision):
    """Bytes of one revision: the blobs its snapshot links to (each once) and the unfinished
    files (one download unit runs at a time, so they are the one under way); and the bytes of
    the other blobs (other revisions'), and the commit the revision resolved to."""
    commit = _commit_of(repo, revision)
    total, seen = 0, set()
    if commit:
        for root, _dirs, names in os.walk(os.path.join(repo, "snapshots", commit)):
            for name in names:
                try:
                    info = os.stat(os.path.join(root, name))  # follows the link to its blob
                except OSError:
                    continue  # a dangling link: that file is not there
                if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    total += info.st_size
    other = 0
    try:
        blobs = list(os.scandir(os.path.join(repo, "blobs")))
    except OSError:
        blobs = []
    for entry in blobs:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # renamed while we look (a finished .incomplete)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) in seen:
            continue
        if entry.name.endswith(".incomplete"):
            total += info.st_size
        else:
            other += info.st_size
    return total, other, commit


def measure(path: str, revision: str = "") -> dict:
    """path_size's result: bytes, files and incomplete files under path (regular files, links
    not followed), the free space of its filesystem (on its nearest existing ancestor,
    probe_path) and, with a revision, revision_bytes, other_revision_bytes, revision_commit.
    Raises OSError when statvfs fails."""
    total = files = incomplete = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue  # a file renamed while we walk
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
                files += 1
                incomplete += name.endswith(".incomplete")
    probe = path
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
    except OSError as exc:
        raise OSError(f"statvfs {probe}: {exc.strerror or exc}") from exc
    found = {
        "bytes": total,
        "files": files,
        "incomplete": incomplete,
        "free_bytes": st.f_bavail * st.f_frsize,
        "probe_path": probe,
    }
    if revision:
        (
            found["revision_bytes"],
            found["other_revision_bytes"],
            found["revision_commit"],
        ) = revision_bytes(path, revision)
    return found
