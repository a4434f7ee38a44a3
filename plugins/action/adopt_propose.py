# Copyright: gpuhost contributors
# Apache-2.0
"""Action plugin: propose the gpuhost settings for the servers sglang_discover found
(controller only; issue 31 item 1, docs/adopt.md).

Reads the profile library (profiles/), the argument catalogues (data/sglang/) and the locks'
pins (locks/) on the controller and hands them with the host facts to the pure
plugins/plugin_utils/gpuhost_adopt.py. Nothing is sent to the host; it changes nothing.
"""

from __future__ import annotations

import glob
import json
import os

import yaml
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

DOCUMENTATION = r"""
---
action: gpuhost.gpu.adopt_propose
short_description: Propose the gpuhost settings that reproduce hand-started SGLang servers
options:
  servers:
    description: The servers gpuhost.gpu.sglang_discover returned.
    type: list
    elements: dict
    required: true
  gpu:
    description: The gpuhost_gpu fact.
    type: dict
  host:
    description: The gpuhost_host fact.
    type: dict
  lane:
    description: The inventory's python_env_lane (used when no lock pins the server's sglang).
    type: str
  nccl_version:
    description: The inventory's nccl_version (names the channel-floor variable); empty for unknown.
    type: str
  service_name:
    description: sglang_server_service_name.
    type: str
  service_user:
    description: gpuhost_service_user.
    type: str
  profiles_dir:
    description: Default profiles/ of this repository.
    type: path
  catalogue_dir:
    description: Default data/sglang/ of this repository.
    type: path
  locks_dir:
    description: Default locks/ of this repository.
    type: path
"""

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_python_env import (  # noqa: E402 - after the doc blocks
    LockError,
    lanes,
    lock_info,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_adopt as adopt  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_plain import plain  # noqa: E402 - after the doc blocks

_REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = plain(dict(self._task.args))
        profiles_dir = args.get("profiles_dir") or os.path.join(_REPO, "profiles")
        catalogue_dir = args.get("catalogue_dir") or os.path.join(_REPO, "data", "sglang")
        locks_dir = args.get("locks_dir") or os.path.join(_REPO, "locks")
        library = [
            (os.path.basename(path)[:-4], yaml.safe_load(_read(path)) or {})
            for path in sorted(glob.glob(os.path.join(profiles_dir, "*.yml")))
        ]
        catalogues = {
            os.path.basename(path)[len("catalogue-") : -len(".json")]: json.loads(_read(path))
            for path in sorted(glob.glob(os.path.join(catalogue_dir, "catalogue-*.json")))
        }
        try:
            locks = {
                lane: lock_info(_read(path), os.path.basename(path))["pins"]
                for lane, path in lanes(glob.glob(os.path.join(locks_dir, "sglang-*.txt"))).items()
            }
        except LockError as exc:
            raise AnsibleActionFail(f"locks: {exc}") from exc
        settings = {
            "lane": args.get("lane") or "cu128",
            "nccl_version": args.get("nccl_version") or None,
            "service_name": args.get("service_name") or "sglang-server",
            "service_user": args.get("service_user") or "gpuhost",
        }
        proposals = []
        try:
            for server in args.get("servers") or []:
                proposals.append(
                    adopt.propose(
                        server,
                        args.get("gpu") or {},
                        args.get("host") or {},
                        library,
                        catalogues,
                        locks,
                        settings,
                    )
                )
        except adopt.AdoptError as exc:
            raise AnsibleActionFail(f"{exc}. Nothing was changed.") from exc
        result.update(changed=False, proposals=proposals, found=len(proposals))
        return result
