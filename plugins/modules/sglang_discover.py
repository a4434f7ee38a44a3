#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Find the SGLang servers gpuhost did not start, and what each runs with (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.sglang_discover
short_description: Find hand-started SGLang servers and read what they run with (read-only)
description:
  - Lists the processes whose argv runs sglang.launch_server (C(python -m
    sglang.launch_server), C(-m sglang.launch_server) after the interpreter's options, or a
    launch_server.py script), except those in gpuhost's own unit (their cgroup is
    C(service_name).service) and workers forked from a server already listed.
  - For each - pid, user, working directory, argv and its parsed flags, the interpreter and
    the venv holding it (pyvenv.cfg above the interpreter), the versions of sglang,
    flashinfer-python, torch and the kernel package read from the venv's METADATA files (never
    imported or run), the NCCL_, CUDA_, HF_, SGLANG_, TORCH_, PYTORCH_, OMP_, TRANSFORMERS_ and
    SAFETENSORS_ variables of its environment, its model and, for a hub id, the hub cache it
    would use with the revisions, refs and blob bytes found there (nothing hashed).
  - Secrets never leave the host - the value of C(--api-key), C(--admin-api-key) and of any
    flag or variable whose name holds TOKEN, KEY, SECRET or PASSWORD is returned as
    C(<redacted>).
  - Paths a user controls are walked without following a symbolic link; files over 1 MiB are
    not read. Read-only (check mode safe). The logic is
    C(plugins/module_utils/gpuhost_sglang_discover.py); docs/adopt.md says what is done with it.
options:
  service_name:
    description: gpuhost's own server unit (sglang_server_service_name), without .service.
    type: str
    default: sglang-server
author: gpuhost contributors
"""

EXAMPLES = r"""
- name: Find hand-started servers
  gpuhost.gpu.sglang_discover:
    service_name: "{{ sglang_server_service_name }}"
  register: _found
"""

RETURN = r"""
servers:
  description: One mapping per server process found (pid, user, uid, cwd, argv, flags,
    interpreter, exe, venv, versions, problems, env, model); secrets as <redacted>.
  type: list
  elements: dict
  returned: always
managed_pids:
  description: Server processes skipped because they run in gpuhost's own unit.
  type: list
  elements: int
  returned: always
"""

import re  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_discover import (  # noqa: E402
    discover,
)

_UNIT = re.compile(r"[A-Za-z0-9:_.@-]{1,200}")


def main():
    module = AnsibleModule(
        argument_spec={"service_name": {"type": "str", "default": "sglang-server"}},
        supports_check_mode=True,
    )
    name = module.params["service_name"]
    if not _UNIT.fullmatch(name):
        module.fail_json(
            msg=f"service_name: got {name!r}; allowed: a systemd unit name without .service "
            "(letters, digits and :_.@-)"
        )
    module.exit_json(changed=False, **discover(name))


if __name__ == "__main__":
    main()
