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
options:
  path: {description: Directory to measure., type: path, required: true}
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
"""

import os  # noqa: E402 - after the doc blocks
import stat  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True)), supports_check_mode=True
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
    module.exit_json(
        changed=False,
        bytes=total,
        files=files,
        incomplete=incomplete,
        free_bytes=free,
        probe_path=probe,
    )


if __name__ == "__main__":
    main()
