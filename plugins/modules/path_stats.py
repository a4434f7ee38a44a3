#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""lstat of several paths in one call, in the shape a looped ansible.builtin.stat registers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.path_stats
short_description: Look at several paths in one call (lstat, never following a link)
description:
  - One round trip for what a looped M(ansible.builtin.stat) with C(follow=false) took one
    per path (issue 29 item 6). C(results[i]) is C({item, stat}) in the order given, with the stat
    keys the roles' guards read (exists, isdir, isreg, islnk, uid, gid, pw_name, gr_name, mode,
    wgrp, woth, size, nlink), so a guard written against the looped stat reads the same.
  - Read-only (check mode safe). The pure logic is C(plugins/module_utils/gpuhost_file_set.py).
options:
  paths: {description: Absolute paths., type: list, elements: path, required: true}
author: gpuhost
"""

EXAMPLES = r"""
- name: Look at the state directories
  gpuhost.gpu.path_stats:
    paths: [/var/lib/gpuhost, /var/lib/gpuhost-service]
  register: _dirs
"""

RETURN = r"""
results:
  description: One C({item, stat}) per path, in order; C(stat.exists) false when absent.
  type: list
  elements: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_file_set import (  # noqa: E402
    look,
)


def main():
    module = AnsibleModule(
        argument_spec={"paths": {"type": "list", "elements": "path", "required": True}},
        supports_check_mode=True,
    )
    module.exit_json(changed=False, results=look(module.params["paths"]))


if __name__ == "__main__":
    main()
