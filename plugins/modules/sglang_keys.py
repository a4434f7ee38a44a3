#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_keys
short_description: Keep the SGLang server's keys file (client key, generated admin key)
description:
  - Writes the root-only (0600) keys file the server unit hands to gpuhost-sglang-launch as
    stdin, C(api_key=) the client key given and C(admin_api_key=) an admin key generated on
    the host (43 URL-safe characters) and kept across runs.
  - The admin key never leaves the host; the result never holds a key.
  - Changed when the content, owner or mode differ; check mode reports what would change.
options:
  path:
    description: The keys file, e.g. /etc/gpuhost/sglang-server.keys.
    type: path
    required: true
  api_key:
    description: The client key (empty for none).
    type: str
    default: ""
  rotate_admin_key:
    description: Replace the admin key with a new one (changed on every run while true).
    type: bool
    default: false
author: gpuhost contributors
"""

EXAMPLES = r"""
- name: Keep the keys
  gpuhost.gpu.sglang_keys:
    path: /etc/gpuhost/sglang-server.keys
    api_key: "{{ sglang_server_api_key }}"
"""

RETURN = r"""
path:
  description: The keys file.
  returned: always
  type: str
admin_key_generated:
  description: Whether a new admin key was (or, in check mode, would be) generated.
  returned: always
  type: bool
"""

import os  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_keys import (  # noqa: E402 - after the doc blocks
    KeysFileError,
    api_key_digest,
    inspect_file,
    kept,
    plan_keys,
    write_private,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "rotate_admin_key": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    api_key, rotate = module.params["api_key"], module.params["rotate_admin_key"]
    try:
        current, meta_ok = inspect_file(path)
    except KeysFileError as exc:
        module.fail_json(msg=str(exc))
    # The comparison path_stats makes for the role's read (gpuhost_sglang_keys.kept): where it
    # holds, this call would change nothing, and the role makes none.
    if not rotate and kept(current, meta_ok, api_key_digest(api_key)):
        module.exit_json(changed=False, path=path, admin_key_generated=False)
    content, fresh = plan_keys(current, api_key, rotate)
    changed = content != current or not meta_ok
    if changed and not module.check_mode:
        if content == current:
            if os.geteuid() == 0:
                os.chown(path, 0, 0)
            os.chmod(path, 0o600)
        else:
            write_private(path, content)
    module.exit_json(changed=changed, path=path, admin_key_generated=fresh)


if __name__ == "__main__":
    main()
