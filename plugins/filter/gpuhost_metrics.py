# Copyright: gpuhost contributors
# Apache-2.0
"""Filters of role metrics; the logic is plugins/module_utils/gpuhost_metrics.py."""

from __future__ import annotations

import os
import sys

# Custom module_utils are not importable from controller plugins outside a collection: put
# plugins/module_utils on sys.path (the gpuhost_ prefix keeps its module names unique).
_UTILS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "module_utils"))
if _UTILS not in sys.path:
    sys.path.append(_UTILS)

import gpuhost_metrics as _metrics  # noqa: E402
from gpuhost_plain import plain  # noqa: E402


def gpuhost_file_sd(hostvars_list, job):
    """play hosts' hostvars | gpuhost_file_sd('node') -> the file_sd list of that job."""
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
        return {"gpuhost_file_sd": gpuhost_file_sd}
