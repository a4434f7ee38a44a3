#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Which parts of the SGLang server config differ between the known-good copy and the live
files (names only), for the rollout report."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.sglang_config_parts
short_description: Name the parts of the server config that changed
description:
  - Reads two versions of the server's systemd unit and env file on the host and returns
    which parts differ (flags, model, venv, nccl, env, unit). Only the part names leave
    the host, never a value. A missing file reads as empty. Read-only.
options:
  old_unit: {description: The unit before (the known-good copy)., type: path, required: true}
  old_env: {description: The env file before., type: path, required: true}
  new_unit: {description: The unit now (the live file)., type: path, required: true}
  new_env: {description: The env file now., type: path, required: true}
author: gpuhost
"""

RETURN = r"""
parts:
  description: The parts that differ, in the order flags, model, venv, nccl, env, unit.
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_config_parts import (  # noqa: E402
    changed_parts,
)


def _read(module, path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""
    except OSError as exc:
        module.fail_json(msg=f"{path}: {exc.strerror or exc}")


def main():
    module = AnsibleModule(
        argument_spec={
            name: dict(type="path", required=True)
            for name in ("old_unit", "old_env", "new_unit", "new_env")
        },
        supports_check_mode=True,
    )
    p = module.params
    parts = changed_parts(
        _read(module, p["old_unit"]),
        _read(module, p["new_unit"]),
        _read(module, p["old_env"]),
        _read(module, p["new_env"]),
    )
    module.exit_json(changed=False, parts=parts)


if __name__ == "__main__":
    main()
