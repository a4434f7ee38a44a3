#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Adopt one revision of a user's Hugging Face hub cache into the managed cache, 0 bytes fetched."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.hf_cache_adopt
short_description: Adopt a revision of a user's Hugging Face hub cache into the managed cache
description:
  - Runs as root. Takes one revision of one model from I(source) (a user's hub cache, e.g.
    C(~/.cache/huggingface/hub)) into I(dest) (the managed cache, C(model_cache_hf_home/hub))
    without downloading anything. Every blob the revision uses is verified against its own
    name (the sha256 of an LFS file, the git blob sha1 of a regular file) and, with
    I(expected_files), against the revision's file list; a file that does not verify is
    refused by name, and the snapshot links and the ref are written only when every file did.
  - Hard links a blob (I(copy=auto), one filesystem) only when it is a regular file of
    I(source_owner) with one name; the linked inode becomes I(owner)'s, read-only
    (I(file_mode)), before it is hashed. The user's old path keeps working, read-only. Else
    copies it into a new file, hashing while copying. Root never follows a link in the
    source (only C(../../blobs/<etag>) snapshot links are read, never followed) and never
    deletes anything there.
  - Check mode reads the layout and reports what would be linked, copied or reused, and the
    bytes; it hashes nothing and changes nothing.
  - The logic is C(plugins/module_utils/gpuhost_hf_cache_adopt.py) (the changes) and
    C(plugins/module_utils/gpuhost_hf_cache.py) (the source, read without following).
options:
  source:
    description: The user's hub cache directory (holds models--OWNER--NAME).
    type: path
    required: true
  dest: {description: The managed hub cache directory (HF_HOME/hub)., type: path, required: true}
  repo_id: {description: The model's Hugging Face repo id., type: str, required: true}
  revision:
    description: A commit sha, or a branch or tag name resolved through the source's C(refs/).
    type: str
    required: true
  owner:
    description: Owner of what is made in I(dest) (the service account).
    type: str
    required: true
  group: {description: Its group., type: str, required: true}
  dir_mode: {description: Mode of the directories made in I(dest)., type: str, default: "0750"}
  file_mode: {description: Mode of the adopted blobs (read-only)., type: str, default: "0444"}
  source_owner:
    description: The user that owns the source cache (the account the old server runs as).
    type: str
    required: true
  copy:
    description: C(auto) hard links on one filesystem, else copies; C(always) copies.
    type: str
    choices: [auto, always]
    default: auto
  expected_files:
    description: The revision's files, path -> C({size, sha256}) (sha256 for LFS files), as
      the hub's C(?blobs=true) answer lists them; {} checks each blob against its name only.
    type: dict
    default: {}
author: gpuhost
"""

EXAMPLES = r"""
- name: Adopt the weights a hand-started server downloaded
  gpuhost.gpu.hf_cache_adopt:
    source: /home/alice/.cache/huggingface/hub
    dest: /var/cache/gpuhost/huggingface/hub
    repo_id: lukealonso/GLM-5-NVFP4
    revision: main
    owner: gpuhost
    group: gpuhost
    source_owner: alice
"""

RETURN = r"""
commit: {description: The commit the revision resolved to., type: str, returned: success}
files: {description: Files in the revision's snapshot., type: int, returned: success}
linked:
  description: Blobs hard linked (would be, in check mode).
  type: list
  elements: str
  returned: always
copied: {description: Blobs copied (would be)., type: list, elements: str, returned: always}
reused:
  description: Blobs already in the managed cache, verified (would be).
  type: list
  elements: str
  returned: always
bytes_linked: {description: Bytes hard linked., type: int, returned: always}
bytes_copied: {description: Bytes copied., type: int, returned: always}
bytes_reused: {description: Bytes reused., type: int, returned: always}
source_changed:
  description: Source blobs whose owner and mode changed (a hard link is one inode under two names).
  type: list
  elements: dict
  returned: always
errors:
  description: Per-file errors (path, blob, error); the task fails when any.
  type: list
  elements: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hf_cache import (  # noqa: E402
    COPY_CHOICES,
    AdoptError,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hf_cache_adopt import (  # noqa: E402
    adopt,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (  # noqa: E402
    ServicePathError,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "repo_id": {"type": "str", "required": True},
            "revision": {"type": "str", "required": True},
            "owner": {"type": "str", "required": True},
            "group": {"type": "str", "required": True},
            "dir_mode": {"type": "str", "default": "0750"},
            "file_mode": {"type": "str", "default": "0444"},
            "source_owner": {"type": "str", "required": True},
            "copy": {"type": "str", "choices": list(COPY_CHOICES), "default": "auto"},
            "expected_files": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        result = adopt(module.params, check=module.check_mode)
    except (AdoptError, ServicePathError) as err:
        module.fail_json(msg=str(err))
    except OSError as err:  # e.g. root squashed on an NFS source: say where, not a traceback
        module.fail_json(msg=f"{params_label(module.params)}: {err.filename}: {err.strerror}")
    if result["errors"]:
        lines = [f"{e.get('path') or e.get('blob')}: {e['error']}" for e in result["errors"]]
        module.fail_json(
            msg=f"{params_label(module.params)}: {len(lines)} file(s) not adopted; nothing of "
            "this revision is in the managed cache until every file verifies: " + "; ".join(lines),
            **result,
        )
    module.exit_json(**result)


def params_label(params):
    return f"{params['repo_id']}@{params['revision']} from {params['source']}"


if __name__ == "__main__":
    main()
