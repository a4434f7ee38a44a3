#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""A role's files and directories, compared and written in one call, never through a link."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.file_set
short_description: Write a role's files and directories in one call, never through a link
description:
  - One round trip for what took one M(ansible.builtin.template), M(ansible.builtin.copy) or
    M(ansible.builtin.file) task per path (issue 29 item 6; a converge with nothing to change
    pays per call). Rendering stays on the controller
    (C(lookup('ansible.builtin.template', ...))).
  - Each entry is handled as M(gpuhost.gpu.service_path) handles its path (no symbolic link
    followed unless only root could have made it; O_NOFOLLOW; a new temporary file in the same
    directory, fsync, rename; owner and mode set on the descriptor); a root-owned file is
    written only into a directory no other account can change. The first refusal fails the
    task before any later entry is touched.
  - C(files[name]) is each entry's result, so a task reads one file's change
    (C(_x.files.unit.changed)) as it read one template task's C(changed).
  - A secret entry's content comes from I(secret_contents) (no_log); it is in no result, no
    diff and no log line. Check mode reports what would change and writes nothing.
  - The pure logic is C(plugins/module_utils/gpuhost_file_set.py).
options:
  files:
    description: The entries, handled in order.
    type: list
    elements: dict
    required: true
    suboptions:
      name: {description: Key of this entry's result under C(files)., type: str, required: true}
      path: {description: Absolute path., type: path, required: true}
      state:
        description:
          - C(file), C(directory), or C(absent) (a file or link there is removed, never
            followed; a directory is refused).
        type: str
        choices: [file, directory, absent]
        default: file
      content: {description: The file's text (not secret)., type: str, default: ""}
      src:
        description:
          - Copy the content from this file on the host (read without following a link),
            instead of I(content).
        type: path
      secret:
        description: The content is I(secret_contents[name]); no diff shows it.
        type: bool
        default: false
      owner: {description: Owner., type: str, default: root}
      group: {description: Group., type: str, default: root}
      mode: {description: Octal mode, e.g. C("0644") (not for C(absent))., type: str}
      check_only:
        description:
          - Compare only, as check mode does, and never write this entry, in the same call as
            the others (a later task then writes it only when this says it would change).
            A refusal is not raised; the entry's result holds it in C(refused) and counts as a
            change. Its change is not the task's C(changed).
        type: bool
        default: false
  secret_contents:
    description: Content of the secret entries, by name (never logged or returned).
    type: dict
    default: {}
author: gpuhost
"""

EXAMPLES = r"""
- name: Write the server's files
  gpuhost.gpu.file_set:
    files:
      - {name: unit, path: /etc/systemd/system/x.service, mode: "0644", content: "[Unit]\n"}
      - {name: env, path: /etc/gpuhost/x.env, mode: "0600", secret: true}
    secret_contents:
      env: "API_KEY=...\n"
  register: _files
"""

RETURN = r"""
files:
  description:
    - Per entry name, C(changed), C(path), C(created) and C(fixed) (see
      M(gpuhost.gpu.service_path)); C(fixed) holds C(content) when the content differs. A
      I(check_only) entry that would be refused has C(refused), the reason.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_file_set import (  # noqa: E402
    apply,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (  # noqa: E402
    ServicePathError,
)

_ENTRY = {
    "name": {"type": "str", "required": True},
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "choices": ["file", "directory", "absent"], "default": "file"},
    "content": {"type": "str", "default": ""},
    "src": {"type": "path"},
    "secret": {"type": "bool", "default": False},
    "owner": {"type": "str", "default": "root"},
    "group": {"type": "str", "default": "root"},
    "mode": {"type": "str"},
    "check_only": {"type": "bool", "default": False},
}


def main():
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True, "options": _ENTRY},
            "secret_contents": {"type": "dict", "default": {}, "no_log": True},
        },
        supports_check_mode=True,
    )
    try:
        result = apply(
            module.params["files"],
            module.params["secret_contents"],
            module.check_mode,
            module._diff,
        )
    except ServicePathError as err:
        module.fail_json(msg=str(err))
    if not module._diff:
        result.pop("diff")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
