# Copyright: gpuhost contributors
# Apache-2.0
"""Action plugin: the difference between a VM's Proxmox config and its spec, as a diff.

Changes nothing itself: it reports changed when the config differs and returns the
difference as Ansible's `diff` (shown with --diff, in check mode too) and as `changes`
({key: {before, after}}) for the tasks that apply it. The logic is
plugins/plugin_utils/gpuhost_proxmox_vm.py (tests/test_proxmox_vm_spec.py).
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_plain
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_vm as logic

DOCUMENTATION = r"""
---
action: gpuhost.gpu.proxmox_vm_plan
short_description: Diff a Proxmox VM config against the proxmox_vm spec
options:
  desired:
    description: The config the spec stands for (gpuhost_proxmox_vm_config).
    type: dict
  current:
    description: "The VM's current config ({} when it does not exist yet)."
    type: dict
  vmid:
    description: The VM id, for the diff headers.
    type: int
"""


def _lines(config):
    return "".join(f"{k}: {v}\n" for k, v in sorted(config.items()) if v is not None)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = gpuhost_plain.plain(self._task.args)
        desired = args.get("desired") or {}
        current = args.get("current") or {}
        changes = logic.config_diff(desired, current)
        vmid = args.get("vmid", "?")
        result["changed"] = bool(changes)
        result["changes"] = changes
        result["diff"] = {
            "before_header": f"qemu-server/{vmid}.conf (Proxmox)",
            "after_header": f"qemu-server/{vmid}.conf (spec)",
            "before": _lines({k: c["before"] for k, c in changes.items()}),
            "after": _lines({k: c["after"] for k, c in changes.items()}),
        }
        result["msg"] = f"{len(changes)} config key(s) differ: {', '.join(sorted(changes))}"
        return result
