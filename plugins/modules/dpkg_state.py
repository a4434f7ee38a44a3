#!/usr/bin/python
"""Ansible module: is dpkg in the middle of an interrupted install? Reads, changes nothing."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_dpkg import (
    DPKG_QUERY_FORMAT,
    assess,
    manual_fix,
    missing,
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
  packages:
    description:
      - Package names to look up in the same read; C(missing) lists those dpkg does not
        have installed (role C(base) runs apt only when one is).
    type: list
    elements: str
    default: []
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
missing:
  description: The names of I(packages) that are not installed, in the order given.
  returned: always
  type: list
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "admindir": {"type": "path", "default": "/var/lib/dpkg"},
            "packages": {"type": "list", "elements": "str", "default": []},
        },
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
    wanted = module.params["packages"]
    arch = ""
    if wanted:
        rc, arch_out, _ = module.run_command(
            ["dpkg", f"--admindir={admindir}", "--print-architecture"], check_rc=False
        )
        arch = arch_out.strip() if rc == 0 else ""
    module.exit_json(
        changed=False,
        fix=manual_fix(found["manual"]) if found["manual"] else "",
        missing=missing(out, wanted, arch),
        **found,
    )


if __name__ == "__main__":
    main()
