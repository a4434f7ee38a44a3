#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Role base's read: dpkg, the service account and the directories, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.base_state
short_description: What role base would change (dpkg, the service account, its directories)
description:
  - One round trip for everything role C(base) compares on a converged host (issue 29 item 6),
    that is dpkg's state as M(gpuhost.gpu.dpkg_state) reads it (an interrupted install, the packages
    not installed), the group and the account as NSS (getent) answers, and the directories as
    M(gpuhost.gpu.file_set) would find them. Role base calls apt, M(ansible.builtin.group),
    M(ansible.builtin.user) and M(gpuhost.gpu.file_set) only where this read names a
    difference, so a hand-removed account or a changed directory mode is still put back.
  - Read-only (check mode safe). The account comparison is
    C(plugins/module_utils/gpuhost_accounts.py); the directories are compared by
    C(plugins/module_utils/gpuhost_file_set.py) in check mode, the same code that writes them.
options:
  admindir: {description: dpkg's database directory., type: path, default: /var/lib/dpkg}
  packages:
    description: Package names whose absence C(missing) lists.
    type: list
    elements: str
    default: []
  group:
    description: The service group (ansible.builtin.group, no gid pinned).
    type: str
    required: true
  user:
    description: The service account as role base passes it to ansible.builtin.user.
    type: dict
    required: true
    suboptions:
      name: {description: Account name., type: str, required: true}
      groups:
        description: Supplementary groups (appended).
        type: list
        elements: str
        default: []
      home: {description: Home directory., type: str, required: true}
      shell: {description: Login shell., type: str, required: true}
  files:
    description: Entries in M(gpuhost.gpu.file_set)'s shape, compared in check mode.
    type: list
    elements: dict
    default: []
author: gpuhost
"""

EXAMPLES = r"""
- name: Read what base would change
  gpuhost.gpu.base_state:
    packages: [acl, curl]
    group: gpuhost
    user:
      name: gpuhost
      groups: [video]
      home: /var/lib/gpuhost/service
      shell: /usr/sbin/nologin
    files:
      - {name: base, path: /opt/gpuhost, state: directory, group: gpuhost, mode: "0755"}
  register: _base
"""

RETURN = r"""
interrupted:
  description: As M(gpuhost.gpu.dpkg_state).
  type: bool
  returned: always
missing:
  description: As M(gpuhost.gpu.dpkg_state).
  type: list
  returned: always
summary:
  description: >-
    As M(gpuhost.gpu.dpkg_state) (so are action, configure, journal, configurable, manual
    and fix).
  type: str
  returned: always
group_changes:
  description: What ansible.builtin.group would change (empty when nothing).
  type: list
  returned: always
user_changes:
  description: What ansible.builtin.user would change (empty when nothing).
  type: list
  returned: always
files_changes:
  description: >-
    The entries file_set would change (name, path, what), or the refusal it would fail
    with (empty when nothing).
  type: list
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils import (  # noqa: E402
    gpuhost_accounts,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_dpkg import read  # noqa: E402
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_file_check import (  # noqa: E402
    files_changes,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "admindir": {"type": "path", "default": "/var/lib/dpkg"},
            "packages": {"type": "list", "elements": "str", "default": []},
            "group": {"type": "str", "required": True},
            "user": {
                "type": "dict",
                "required": True,
                "options": {
                    "name": {"type": "str", "required": True},
                    "groups": {"type": "list", "elements": "str", "default": []},
                    "home": {"type": "str", "required": True},
                    "shell": {"type": "str", "required": True},
                },
            },
            "files": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        found = read(module.run_command, params["admindir"], params["packages"])
    except RuntimeError as exc:
        module.fail_json(msg=str(exc))
    user = params["user"]
    wanted = {**user, "group": params["group"], "user": user["name"]}
    account = gpuhost_accounts.changes(
        gpuhost_accounts.read(params["group"], user["name"], user["groups"]), wanted
    )
    module.exit_json(
        changed=False,
        group_changes=account["group"],
        user_changes=account["user"],
        files_changes=files_changes(params["files"]),
        **found,
    )


if __name__ == "__main__":
    main()
