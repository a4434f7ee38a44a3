#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Role nccl's one read of the server's Python and the NCCL version its torch ships."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.nccl_torch
short_description: Is the server's Python there, and which NCCL does its torch ship
description:
  - One round trip for what a M(ansible.builtin.stat) of the interpreter and a
    M(ansible.builtin.command) asking torch took two (issue 29 item 6).
  - I(exists) is an lstat (a link counts). With I(read_version), an existing interpreter is
    run once with C(-c) to print C(torch.cuda.nccl.version()); a failure (no torch, a CPU
    build) gives an empty I(version), never a failed task.
  - Run it as the service account (C(become_user)): root runs nothing from the server's venv.
  - With I(compare), the same call says whether M(gpuhost.gpu.file_set) would change the
    role's files (C(changes_and_texts) in C(plugins/module_utils/gpuhost_file_check.py),
    file_set's own check mode), so that the role skips its write when nothing would change
    (one call on a no-op where a read and a write took two). An entry with I(current) is
    judged on its kind, owner, group, mode and directory only, and its text returned,
    because what it will hold depends on the version read here. Anything this account
    cannot read counts as a change.
  - Read-only (check mode safe). The pure logic is C(plugins/module_utils/gpuhost_nccl_torch.py).
options:
  python: {description: The interpreter (the venv's C(bin/python))., type: path, required: true}
  read_version:
    description: Ask its torch for the NCCL version (false when C(nccl_version) is pinned).
    type: bool
    default: true
  interfaces:
    description:
      - Also list the host's network interfaces, their addresses (C(ip -j addr show)) and
        link speeds (C(/sys/class/net/*/speed)), for a serving group's NCCL_SOCKET_IFNAME check.
    type: bool
    default: false
  compare:
    description: M(gpuhost.gpu.file_set) entries to compare, never to write.
    type: list
    elements: dict
    suboptions:
      name:
        description: The entry's key (its text under C(compared.texts)).
        type: str
        required: true
      path: {description: Absolute path., type: path, required: true}
      state:
        description: C(file) or C(directory).
        type: str
        choices: [file, directory]
        default: file
      content: {description: The file's text., type: str, default: ""}
      current:
        description: Compare with what it holds now; return that text.
        type: bool
        default: false
      owner: {description: Owner., type: str, default: root}
      group: {description: Group., type: str, default: root}
      mode: {description: Octal mode., type: str, required: true}
author: gpuhost
"""

EXAMPLES = r"""
- name: Read the NCCL version torch ships
  become: true
  become_user: gpuhost
  gpuhost.gpu.nccl_torch:
    python: /opt/gpuhost/venv/bin/python
  register: _torch
"""

RETURN = r"""
exists: {description: The interpreter's path exists (lstat)., type: bool, returned: always}
version:
  description: NCCL version torch reports; "" when not read or unreadable.
  type: str
  returned: always
exit_status:
  description: Exit status of the read (not C(rc), which fails a task); null when it did not run.
  type: int
  returned: always
stderr: {description: The read's last 2000 characters of stderr., type: str, returned: always}
interfaces:
  description: "With I(interfaces), by name: addresses (null when C(ip) is absent) and speed_mbps."
  type: dict
  returned: when I(interfaces) is true
compared:
  description:
    - C(changes) (one line per entry file_set would change, or why the comparison could not
      be made; empty when nothing would change) and C(texts) (by name, what each I(current)
      entry holds now).
  type: dict
  returned: when I(compare) is given
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_file_check import (  # noqa: E402
    changes_and_texts,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nccl_torch import (  # noqa: E402
    interfaces,
    look,
)

# The entries' fields file_set takes (plugins/modules/file_set.py) that a comparison reads.
_ENTRY = {
    "name": {"type": "str", "required": True},
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "choices": ["file", "directory"], "default": "file"},
    "content": {"type": "str", "default": ""},
    "current": {"type": "bool", "default": False},
    "owner": {"type": "str", "default": "root"},
    "group": {"type": "str", "default": "root"},
    "mode": {"type": "str", "required": True},
}


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "read_version": {"type": "bool", "default": True},
            "interfaces": {"type": "bool", "default": False},
            "compare": {"type": "list", "elements": "dict", "options": _ENTRY},
        },
        supports_check_mode=True,
    )
    result = look(
        module.params["python"],
        module.params["read_version"],
        lambda argv: module.run_command(argv, check_rc=False),
    )
    if module.params["interfaces"]:
        result["interfaces"] = interfaces(
            module.get_bin_path("ip"), lambda argv: module.run_command(argv, check_rc=False)
        )
    if module.params["compare"]:
        result["compared"] = changes_and_texts(module.params["compare"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
