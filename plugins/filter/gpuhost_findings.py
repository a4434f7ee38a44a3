# Copyright: gpuhost contributors
# Apache-2.0
"""Filters that turn gpuhost facts into findings (docs/facts.md).

The decisions live in plugins/plugin_utils (gpuhost_preflight) and plugins/module_utils
(gpuhost_proxmox, which module doctor also runs on the host) with unit
tests; these filters only expose them to the roles.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_finding as _finding
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_proxmox as _proxmox
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_preflight as _preflight


def gpuhost_preflight_findings(gpu, host, requirements):
    """gpuhost_gpu | gpuhost.gpu.preflight_findings(gpuhost_host, {...requirements})"""
    return _preflight.preflight_findings(dict(gpu), dict(host), dict(requirements))


def gpuhost_proxmox_findings(gpu, host, dmesg=None, xid_fail_codes=None):
    """gpuhost_gpu | gpuhost.gpu.proxmox_findings(gpuhost_host, dmesg_text_or_none, [79, ...])"""
    codes = _proxmox.DEFAULT_XID_FAIL if xid_fail_codes is None else xid_fail_codes
    return _proxmox.proxmox_findings(dict(gpu), dict(host), dmesg, [int(c) for c in codes])


def gpuhost_merge_findings(existing, new, prefix):
    """Replace the findings whose check starts with prefix; keep everyone else's."""
    return _finding.merge_findings(list(existing or []), list(new), prefix)


def gpuhost_finding(check, status, message, fix=""):
    """'role.check' | gpuhost.gpu.finding(status, message, fix): one finding, the shape and
    statuses of module_utils/gpuhost_finding.py (a status other than pass/warn/fail fails)."""
    return _finding.finding(str(check), str(status), str(message), str(fix or ""))


class FilterModule:
    def filters(self):
        return {
            "preflight_findings": gpuhost_preflight_findings,
            "proxmox_findings": gpuhost_proxmox_findings,
            "merge_findings": gpuhost_merge_findings,
            "finding": gpuhost_finding,
        }
