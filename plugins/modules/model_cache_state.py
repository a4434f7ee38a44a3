#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Role model_cache's read: the cache's disk, the marker, the download unit, its directories."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.model_cache_state
short_description: What role model_cache decides from, in one read
description:
  - One round trip for what took four (issue 29 item 6), that is the measure of
    M(gpuhost.gpu.path_size) (the cache's free space, this revision's bytes already there),
    whether the completion marker exists (lstat, so a link there counts, as
    ansible.builtin.stat found it), the download unit's state (C(systemctl show)), and
    whether M(gpuhost.gpu.file_set) would change the role's entries (the leftover token
    file, HF_HOME, the marker directory). Role model_cache reads it once per run, in
    preflight, and calls file_set and the download steps only where it says there is
    something to do.
  - Read-only (check mode safe). The measure is C(plugins/module_utils/gpuhost_path_size.py);
    the entries are compared by C(plugins/module_utils/gpuhost_file_set.py) in check mode, the
    code that writes them.
options:
  path:
    description: The repo's directory in the hub cache (models--org--name).
    type: path
    required: true
  revision:
    description: A commit sha or a branch (resolved through C(refs/<branch>)); "" skips it.
    type: str
    default: ""
  marker: {description: The completion marker's path; "" skips it., type: str, default: ""}
  unit:
    description: The download unit (without .service); "" skips it.
    type: str
    default: ""
  unit_required:
    description:
      - Fail when C(systemctl show) cannot read the unit; false reports it in C(unit_error)
        instead (preflight, which also runs where systemd is not PID 1).
    type: bool
    default: true
  files:
    description: Entries in M(gpuhost.gpu.file_set)'s shape, compared in check mode.
    type: list
    elements: dict
    default: []
author: gpuhost
"""

EXAMPLES = r"""
- name: Read the download's state
  gpuhost.gpu.model_cache_state:
    path: /var/cache/gpuhost/huggingface/hub/models--org--name
    revision: main
    marker: /var/cache/gpuhost/huggingface/gpuhost-complete/org--name@main.json
    unit: gpuhost-model-download
  register: _state
"""

RETURN = r"""
free_bytes:
  description: >-
    As M(gpuhost.gpu.path_size) (so are bytes, files, incomplete, probe_path and, with a
    revision, revision_bytes, other_revision_bytes, revision_commit).
  type: int
  returned: always
marker:
  description: I(marker) as given (which model and revision this read is of).
  type: str
  returned: always
marker_exists:
  description: Something is at I(marker) (false when I(marker) is "").
  type: bool
  returned: always
unit_show:
  description: >-
    C(systemctl show) of the unit (LoadState, ActiveState, SubState, Result,
    ExecMainStatus, Description); "" when I(unit) is "" or it could not be read.
  type: str
  returned: always
unit_error:
  description: >-
    Why C(systemctl show) could not read the unit ("" when it could), with I(unit_required)
    false.
  type: str
  returned: always
files_changes:
  description: >-
    The entries file_set would change (name, path, what), or the refusal it would fail
    with (empty when nothing).
  type: list
  returned: always
"""

import os  # noqa: E402 - after the doc blocks
import re  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_file_check import (  # noqa: E402
    files_changes,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_path_size import (  # noqa: E402
    measure,
)

_UNIT = re.compile(r"[A-Za-z0-9@_.-]+")
_PROPERTIES = "LoadState,ActiveState,SubState,Result,ExecMainStatus,Description"


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "revision": {"type": "str", "default": ""},
            "marker": {"type": "str", "default": ""},
            "unit": {"type": "str", "default": ""},
            "unit_required": {"type": "bool", "default": True},
            "files": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        found = measure(params["path"], params["revision"])
    except OSError as exc:
        module.fail_json(msg=str(exc))
    show = error = ""
    if params["unit"]:
        if not _UNIT.fullmatch(params["unit"]):
            module.fail_json(msg=f"unit: {params['unit']!r} is not a unit name")
        rc, show, err = module.run_command(
            ["systemctl", "show", f"{params['unit']}.service", "-p", _PROPERTIES], check_rc=False
        )
        if rc != 0:
            error = f"systemctl show {params['unit']}.service: {err.strip()}"
            if params["unit_required"]:
                module.fail_json(msg=error, rc=rc)
            show = ""
    module.exit_json(
        changed=False,
        marker=params["marker"],
        marker_exists=bool(params["marker"]) and os.path.lexists(params["marker"]),
        unit_show=show,
        unit_error=error,
        files_changes=files_changes(params["files"]),
        **found,
    )


if __name__ == "__main__":
    main()
