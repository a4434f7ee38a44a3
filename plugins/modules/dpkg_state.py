#!/usr/bin/python
"""Ansible module: is dpkg in the middle of an interrupted install? Reads, changes nothing."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_dpkg import (
    DPKG_QUERY_FORMAT,
    assess,
    manual_fix,
)

DOCUMENTATION = r"""
---
module: dpkg_state
short_description: Detect an interrupted dpkg (pending journal, packages not configured)
description:
  - Reads dpkg's database with C(dpkg-query) and lists its journal directory
    (I(admindir)/updates). Changes nothing, so it runs the same in check mode.
  - Used by role C(base) (C(tasks_from) C(dpkg)) before the first apt install on a host and
    by role C(cuda_repo) before the driver and CUDA packages; the decision is
    plugins/module_utils/gpuhost_dpkg.py.
options:
  admindir:
    description: dpkg's database directory.
    type: path
    default: /var/lib/dpkg
author: gpuhost
"""

EXAMPLES = r"""
- name: Read dpkg's state
  gpuhost.gpu.dpkg_state:
  register: _dpkg
"""

RETURN = r"""
interrupted:
  description: Something is unfinished (journal entries, packages not configured or half installed).
  returned: always
  type: bool
action:
  description: >-
    none, configure (dpkg --configure -a finishes it) or manual (a package needs
    reinstalling).
  returned: always
  type: str
configure:
  description: There is something C(dpkg --configure -a) finishes.
  returned: always
  type: bool
journal:
  description: Pending journal entries in I(admindir)/updates.
  returned: always
  type: list
configurable:
  description: >-
    Packages unpacked, half-configured or awaiting triggers (name, version, want, flag,
    state).
  returned: always
  type: list
manual:
  description: Packages half installed or flagged reinstreq.
  returned: always
  type: list
summary:
  description: One line saying what was found.
  returned: always
  type: str
fix:
  description: What a person does for the manual packages ("" when there are none).
  returned: always
  type: str
"""


def main():
    module = AnsibleModule(
        argument_spec={"admindir": {"type": "path", "default": "/var/lib/dpkg"}},
        supports_check_mode=True,
    )
    admindir = module.params["admindir"]
    rc, out, err = module.run_command(
        ["dpkg-query", f"--admindir={admindir}", "-W", f"-f={DPKG_QUERY_FORMAT}"],
        check_rc=False,
        environ_update={"LC_ALL": "C"},
    )
    if rc != 0:
        module.fail_json(msg=f"dpkg-query could not read {admindir}: {err.strip()}", rc=rc)
    try:
        updates = os.listdir(os.path.join(admindir, "updates"))
    except OSError:
        updates = []
    found = assess(out, updates)
    module.exit_json(
        changed=False, fix=manual_fix(found["manual"]) if found["manual"] else "", **found
    )


if __name__ == "__main__":
    main()
