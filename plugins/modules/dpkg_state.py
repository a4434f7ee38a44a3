#!/usr/bin/python
"""Ansible module: is dpkg in the middle of an interrupted install? Reads, changes nothing."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_dpkg import read

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
    try:
        found = read(module.run_command, module.params["admindir"], module.params["packages"])
    except RuntimeError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
