# Copyright: gpuhost contributors
# Apache-2.0
"""Filters of role metrics; the logic is plugins/plugin_utils/gpuhost_metrics.py."""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_metrics as _metrics
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_plain import plain


def gpuhost_file_sd(hostvars_list, job):
    """play hosts' hostvars | gpuhost.gpu.file_sd('node') -> the file_sd list of that job."""
    hosts = [
        {
            "inventory_hostname": str(hv.get("inventory_hostname")),
            "gpuhost_metrics": plain(hv.get("gpuhost_metrics") or {}),
        }
        for hv in hostvars_list
    ]
    return _metrics.file_sd_groups(hosts, str(job))


class FilterModule:
    def filters(self):
        return {"file_sd": gpuhost_file_sd}
