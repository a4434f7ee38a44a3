# Copyright: gpuhost contributors
# Apache-2.0
"""Filter of the proxmox_host role: the node report and the VM's spec in, findings out.

The checks live in plugins/plugin_utils/gpuhost_proxmox_host.py (unit-tested in
tests/test_proxmox_host_findings.py), and how they read for a VM that runs on the node now
in gpuhost_node_running.py (tests/test_node_running.py); this filter only exposes them.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_node_running as _running
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_plain as _plain
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_host as _host
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_placement as _place


def gpuhost_proxmox_host_findings(report, spec):
    """report_text | gpuhost.gpu.proxmox_host_findings({node, gpus, memory_mib, ...})"""
    return _host.host_findings(str(report), _plain.plain(spec))


def gpuhost_proxmox_host_unread(ssh_host, address, why):
    """proxmox_vm_node_ssh_host | gpuhost.gpu.proxmox_host_unread(address, ping's msg):
    [the finding that says the node was not read, and why]"""
    return [_running.unread_finding(str(ssh_host), str(address), str(why or ""))]


def gpuhost_proxmox_host_topology(report, node):
    """report_text | gpuhost.gpu.proxmox_host_topology(node) -> gpuhost_proxmox_node"""
    return _place.node_topology(str(report), str(node))


def gpuhost_proxmox_host_paths(mappings_json, node, gpus):
    """The PCI paths on node of the given mapping ids (for the per-device reads)."""
    try:
        mappings = json.loads(str(mappings_json))
    except ValueError:
        return []
    paths = _host._mapping_paths(mappings, str(node))
    found = {p for g in _plain.plain(gpus) for p in paths.get(g, [])}
    return sorted(
        p for p in found if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}(\.[0-7])?", p)
    )


class FilterModule:
    def filters(self):
        return {
            "proxmox_host_findings": gpuhost_proxmox_host_findings,
            "proxmox_host_paths": gpuhost_proxmox_host_paths,
            "proxmox_host_topology": gpuhost_proxmox_host_topology,
            "proxmox_host_unread": gpuhost_proxmox_host_unread,
        }
