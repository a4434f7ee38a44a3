#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Bytes under a directory (regular files only, links not followed), for download progress."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.path_size
short_description: Size of the files under a directory
description:
  - Sums the apparent size of the regular files under I(path) without following links (the
    Hugging Face cache links snapshots to blobs), and counts unfinished C(*.incomplete) files.
    A missing path is 0 bytes. Read-only. Also reports the free space of the filesystem
    the path is (or will be) on, measured on its nearest existing ancestor.
  - With I(revision), also the bytes that belong to that revision of a Hugging Face cache repo
    (I(path) being its C(models--org--name) directory), that is the files its snapshot links to
    plus the unfinished C(*.incomplete) ones, so the files of other revisions kept beside it
    are not counted as already downloaded. Only sizes are read (no file content); the ref file
    of a branch is read only when it is a regular file, and must hold a 40-hex commit.
options:
  path: {description: Directory to measure., type: path, required: true}
  revision:
    description: A commit sha or a branch (resolved through C(refs/<branch>)); "" skips it.
    type: str
    default: ""
author: gpuhost
"""

RETURN = r"""
bytes: {description: Total size of regular files., type: int, returned: always}
files: {description: Number of regular files., type: int, returned: always}
incomplete: {description: Files still being written (*.incomplete)., type: int, returned: always}
free_bytes:
  description: Bytes available to unprivileged users on the path's filesystem.
  type: int
  returned: always
probe_path:
  description: The nearest existing ancestor the free space was measured on.
  type: str
  returned: always
revision_bytes:
  description: Bytes of the revision's snapshot files plus unfinished files (0 when none).
  type: int
  returned: when revision is set
other_revision_bytes:
  description: Bytes of the finished blobs its snapshot does not link to (other revisions').
  type: int
  returned: when revision is set
revision_commit:
  description: The commit the revision resolved to ("" when a branch has no ref yet).
  type: str
  returned: when revision is set
"""

import os  # noqa: E402 - after the doc blocks
import re  # noqa: E402 - after the doc blocks
import stat  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks

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


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True), revision=dict(type="str", default="")
        ),
        supports_check_mode=True,
    )
    total = files = incomplete = 0
    for root, _dirs, names in os.walk(module.params["path"]):
        for name in names:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue  # a file renamed while we walk
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
                files += 1
                incomplete += name.endswith(".incomplete")
    probe = module.params["path"]
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
        free = st.f_bavail * st.f_frsize
    except OSError as exc:
        module.fail_json(msg=f"statvfs {probe}: {exc.strerror or exc}")
    extra = {}
    if module.params["revision"]:
        (
            extra["revision_bytes"],
            extra["other_revision_bytes"],
            extra["revision_commit"],
        ) = revision_bytes(module.params["path"], module.params["revision"])
    module.exit_json(
        **extra,
        changed=False,
        bytes=total,
        files=files,
        incomplete=incomplete,
        free_bytes=free,
        probe_path=probe,
    )


if __name__ == "__main__":
    main()
