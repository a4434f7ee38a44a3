#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""What a check run on this host cannot see (plugins/module_utils/gpuhost_check_mode.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.check_mode_probe
short_description: What check mode cannot see on a host not yet provisioned
description:
  - Read-only. In check mode, says whether the apt module can plan here (python3-apt
    importable by this interpreter, the one the apt module runs under) and which of
    I(users) do not exist yet, so that the steps needing them skip instead of failing, and
    gives the one finding (C(check_mode.unseen)) that names what was not seen and how to see
    it (docs/check-mode.md). Outside check mode it reports nothing missing.
options:
  users:
    description: Accounts later steps become (become_user).
    type: list
    elements: str
    default: []
author: gpuhost
"""

RETURN = r"""
apt:
  description: True when check mode cannot run the apt module here.
  type: bool
  returned: always
users_missing:
  description: Accounts of I(users) that do not exist (check mode only).
  type: list
  returned: always
unseen:
  description: One line per thing check mode cannot see.
  type: list
  returned: always
findings:
  description: "[] or the one check_mode.unseen finding (docs/facts.md)."
  type: list
  returned: always
"""

import importlib.util  # noqa: E402 - after the doc blocks
import pwd  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuhost.gpu.plugins.module_utils import (  # noqa: E402
    gpuhost_check_mode as _check_mode,
)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={"users": {"type": "list", "elements": "str", "default": []}},
        supports_check_mode=True,
    )
    check = module.check_mode
    apt_ok = not check or importlib.util.find_spec("apt_pkg") is not None
    users = {u: (not check or _user_exists(u)) for u in module.params["users"]}
    spots = _check_mode.blind_spots(check, apt_ok, users)
    module.exit_json(changed=False, findings=_check_mode.finding(spots), **spots)


if __name__ == "__main__":
    main()
