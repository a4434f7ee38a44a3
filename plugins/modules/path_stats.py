#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""lstat of several paths in one call, in the shape a looped ansible.builtin.stat registers;
small files' text and units' state in the same call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.path_stats
short_description: Look at several paths in one call (lstat, never following a link)
description:
  - One round trip for what a looped M(ansible.builtin.stat) with C(follow=false) took one
    per path (issue 29 item 6). C(results[i]) is C({item, stat}) in the order given, with the stat
    keys the roles' guards read (exists, isdir, isreg, islnk, uid, gid, pw_name, gr_name, mode,
    wgrp, woth, size, nlink, and lnk_target for a link), so a guard written against the looped
    stat reads the same.
  - In the same call, optionally, the text of small regular files (I(read), what
    M(ansible.builtin.slurp) returned, found by the rules of M(gpuhost.gpu.service_path), no
    link followed unless only root could have made it) and the state of systemd units (I(units),
    the C(status) keys M(ansible.builtin.systemd_service) returned that the roles read), so a
    role's no-op path reads everything it needs in one round trip.
  - Also optionally, whether M(gpuhost.gpu.sglang_keys) would leave the server's keys file as
    it is (I(keys_file)), by the comparison that module makes, from a digest of the client key;
    no key is passed or returned, so role sglang_server calls that module only when it would
    change something.
  - Read-only (check mode safe). The pure logic is
    C(plugins/module_utils/gpuhost_file_set.py), C(plugins/module_utils/gpuhost_unit_state.py)
    and C(plugins/module_utils/gpuhost_sglang_keys.py).
options:
  paths: {description: Absolute paths., type: list, elements: path, required: true}
  read:
    description:
      - Absolute paths of small text files (at most 1 MiB) to return in C(texts); a missing one
        is left out, one that is not a regular file fails the task.
    type: list
    elements: path
    default: []
  units:
    description: Unit names (e.g. C(sglang-server.service)) to return in C(units).
    type: list
    elements: str
    default: []
  keys_file:
    description:
      - The server's keys file and the sha256 (hex) of the client key it should hold; the
        answer is C(keys_file.kept). Left out, C(keys_file) is not returned.
    type: dict
    suboptions:
      path: {description: The keys file., type: path, required: true}
      api_key_sha256:
        description: sha256 hex of the client key (never the key).
        type: str
        required: true
author: gpuhost
"""

EXAMPLES = r"""
- name: Look at the state directories
  gpuhost.gpu.path_stats:
    paths: [/var/lib/gpuhost, /var/lib/gpuhost-service]
  register: _dirs
"""

RETURN = r"""
results:
  description: One C({item, stat}) per path, in order; C(stat.exists) false when absent.
  type: list
  elements: dict
  returned: always
texts:
  description: Path -> text of each file of I(read) that exists.
  type: dict
  returned: always
units:
  description:
    - Unit -> C({LoadState, ActiveState, SubState, UnitFileState}) as C(systemctl show)
      reports them (C(LoadState=not-found) for a unit systemd does not know).
  type: dict
  returned: always
keys_file:
  description:
    - C({path, kept}); C(kept) true when M(gpuhost.gpu.sglang_keys) without rotation would
      change nothing there (owner, mode, and the text it renders from that client key and the
      admin key the file holds); false for no file, a link or anything else to fix.
  type: dict
  returned: when I(keys_file) is given
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_file_set import (  # noqa: E402
    look,
    read_texts,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (  # noqa: E402
    ServicePathError,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_keys import (  # noqa: E402
    look_kept,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_unit_state import (  # noqa: E402
    UnitStateError,
    parse_show,
    show_argv,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "read": {"type": "list", "elements": "path", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "keys_file": {
                "type": "dict",
                "options": {
                    "path": {"type": "path", "required": True},
                    "api_key_sha256": {"type": "str", "required": True, "no_log": True},
                },
            },
        },
        supports_check_mode=True,
    )
    units = module.params["units"]
    try:
        texts = read_texts(module.params["read"])
        states = {}
        if units:
            argv = show_argv(module.get_bin_path("systemctl", required=True), units)
            rc, out, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(msg=f"{' '.join(argv)} failed (rc {rc}): {err.strip()}")
            states = parse_show(out, units)
    except (ServicePathError, UnitStateError) as exc:
        module.fail_json(msg=str(exc))
    extra = {}
    if module.params["keys_file"]:
        extra["keys_file"] = look_kept(**module.params["keys_file"])
    module.exit_json(
        changed=False, results=look(module.params["paths"]), texts=texts, units=states, **extra
    )


if __name__ == "__main__":
    main()
