#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""A directory or file root makes where the service account can write, never through a link."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.service_path
short_description: Make a directory or file where the service account writes, never via a link
description:
  - What root uses instead of M(ansible.builtin.file) and M(ansible.builtin.copy) for every
    path below a directory the service account can write (gpuhost_cache_dir,
    gpuhost_service_state_dir; the caches, HF_HOME, the completion markers). Those follow a
    symbolic link the account planted, so root would chown or write its target.
  - Walks from C(/) one component at a time on open descriptors (O_NOFOLLOW). A symbolic link
    is followed only when it lies in a directory only root can change and is root's (an
    admin's C(/var/cache/gpuhost -> /data/gpuhost)); any other link, and a FIFO, device, socket
    or hard-linked file where a directory or file belongs, fails the task before anything is
    changed, naming the path, what is there and who can write its parent.
  - Missing parents are created root:root 0755. Owner and mode are set on the opened
    descriptor; a file is written to a new temporary file beside it and renamed over it.
  - Check mode reports what would be created or changed and never fails because a parent,
    or the account (role base makes it), does not exist yet.
  - The pure logic is C(plugins/module_utils/gpuhost_service_path.py).
options:
  path: {description: Absolute path of the directory or file., type: path, required: true}
  state:
    description: C(directory), or C(file) (a regular file holding I(content)).
    type: str
    choices: [directory, file]
    default: directory
  content: {description: The file's text (I(state=file))., type: str, default: ""}
  owner: {description: Owner of the directory or file., type: str, required: true}
  group: {description: Its group., type: str, required: true}
  mode: {description: Its octal mode, e.g. C("0750")., type: str, required: true}
author: gpuhost
"""

EXAMPLES = r"""
- name: Create the FlashInfer JIT cache for the service account
  gpuhost.gpu.service_path:
    path: /var/cache/gpuhost/flashinfer
    owner: gpuhost
    group: gpuhost
    mode: "0750"

- name: Write a completion marker
  gpuhost.gpu.service_path:
    path: /var/cache/gpuhost/huggingface/gpuhost-complete/org--model@main.json
    state: file
    content: "{}\n"
    owner: gpuhost
    group: gpuhost
    mode: "0640"
"""

RETURN = r"""
path:
  description: The path acted on (a trusted link's target when one was followed).
  type: str
  returned: always
created:
  description: Directories and the file created (would be, in check mode), outermost first.
  type: list
  elements: str
  returned: always
fixed:
  description: What was wrong with an existing one and was set (owner, group, mode, content).
  type: list
  elements: str
  returned: always
"""

import re  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (  # noqa: E402
    ServicePathError,
    ensure_directory,
    write_file,
)

_MODE = re.compile(r"^0?[0-7]{3,4}$")


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["directory", "file"], "default": "directory"},
            "content": {"type": "str", "default": ""},
            "owner": {"type": "str", "required": True},
            "group": {"type": "str", "required": True},
            "mode": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not _MODE.match(p["mode"]):
        module.fail_json(msg=f"mode: {p['mode']!r} is not an octal mode such as '0750'")
    mode = int(p["mode"], 8)
    try:
        if p["state"] == "file":
            result = write_file(
                p["path"], p["content"].encode(), p["owner"], p["group"], mode, module.check_mode
            )
        else:
            result = ensure_directory(p["path"], p["owner"], p["group"], mode, module.check_mode)
    except ServicePathError as err:
        module.fail_json(msg=str(err), path=p["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
