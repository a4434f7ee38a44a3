# Copyright: gpuhost contributors
# Apache-2.0
"""Filter of the proxmox_host role's node tuning block (issue 32): the node's CPU governor,
C-states and the ACS control of the bridges between the GPUs in, findings out.

The checks live in plugins/plugin_utils/gpuhost_node_tuning.py (unit-tested in
tests/test_node_tuning.py); this filter only exposes them to the role.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_node_tuning as _tuning
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_plain as _plain


def gpuhost_proxmox_host_tuning_findings(report, spec):
    """report_text | gpuhost.gpu.proxmox_host_tuning_findings({gpus, gpu_clique})"""
    return _tuning.tuning_findings(str(report), _plain.plain(spec))


class FilterModule:
    def filters(self):
        return {"proxmox_host_tuning_findings": gpuhost_proxmox_host_tuning_findings}
