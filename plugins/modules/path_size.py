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

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_path_size import (  # noqa: E402
    measure,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True), revision=dict(type="str", default="")
        ),
        supports_check_mode=True,
    )
    try:
        found = measure(module.params["path"], module.params["revision"])
    except OSError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
