#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Before any change: can role python_env build the venv from this host's Python?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.python_env_fit
short_description: The host's Python against the selected lock, as a preflight finding
description:
  - Asks I(python) its version, then applies the rule role python_env applies after its
    probe (C(choose_python) in plugins/module_utils/gpuhost_python_env.py) and returns it
    as the finding
    C(python_env.python). A host whose Python is not the lock's (Ubuntu 22.04's 3.10 with the
    3.11 locks) fails there, in the preflight stage, before the NVIDIA driver or anything
    else is installed; with I(source) C(managed) it passes, since uv installs the lock's
    Python then.
  - Never changes anything (check mode safe). Role python_env runs it when role preflight
    includes it.
options:
  python:
    description: The interpreter the venv is built from (python_env_python).
    type: path
    required: true
  source:
    description: Where the venv's Python comes from (python_env_python_source).
    type: str
    required: true
  lock_python:
    description: The X.Y the lock was resolved for; "" when its header names none.
    type: str
    default: ""
  lock_name: {description: The lock's file name., type: str, required: true}
  install_dir:
    description: Where uv installs the managed interpreter (python_env_python_install_dir).
    type: path
    required: true
  os_name:
    description: The host's OS as the message names it (gpuhost_host.os.pretty_name, read by
      role preflight); "" names none.
    type: str
    default: ""
author: gpuhost
"""

EXAMPLES = r"""
- name: Check the host's Python against the lock
  gpuhost.gpu.python_env_fit:
    python: /usr/bin/python3
    source: system
    lock_python: "3.11"
    lock_name: sglang-0.5.10.post1-cu128.txt
    install_dir: /opt/gpuhost/python
  register: fit
"""

RETURN = r"""
python_version:
  description: The version I(python) reported, e.g. 3.10.12; empty when it does not run.
  type: str
  returned: always
finding:
  description: The finding C(python_env.python) (C(check), C(status) pass or fail, C(message),
    C(fix)).
  type: dict
  returned: always
"""

import os  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_python_env import (  # noqa: E402
    PYTHON_VERSION_ARGV,
    python_fit_finding,
)


def python_version(module, python):
    """What the interpreter says its version is; "" when it is missing or does not run."""
    if not os.access(python, os.X_OK):
        return ""
    rc, out, _ = module.run_command([python, *PYTHON_VERSION_ARGV])
    return out.strip() if rc == 0 else ""


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "source": {"type": "str", "required": True},
            "lock_python": {"type": "str", "default": ""},
            "lock_name": {"type": "str", "required": True},
            "install_dir": {"type": "path", "required": True},
            "os_name": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    version = python_version(module, p["python"])
    finding = python_fit_finding(
        p["source"],
        p["python"],
        version,
        p["lock_python"] or None,
        p["lock_name"],
        p["install_dir"],
        os_name=p["os_name"],
    )
    module.exit_json(changed=False, python_version=version, finding=finding)


if __name__ == "__main__":
    main()
