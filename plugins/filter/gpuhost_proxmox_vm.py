# Copyright: gpuhost contributors
# Apache-2.0
"""Filters of the proxmox_vm role: the VM spec's refusals, its Proxmox config, the diff.

The decisions live in plugins/plugin_utils/gpuhost_proxmox_vm.py (unit-tested in
tests/test_proxmox_vm_spec.py); these filters only expose them to the role.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_plain as _plain
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_placement as _place
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_vm as _vm
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_pve_schema as _schema

_FACTS = {}


def _facts():
    if not _FACTS:
        _FACTS.update(_schema.load_facts())
    return _FACTS


def gpuhost_proxmox_vm_spec_errors(spec):
    """spec | gpuhost.gpu.proxmox_vm_spec_errors -> ['proxmox_vm_x=...: why', ...]"""
    return _vm.spec_errors(_plain.plain(spec), _facts())


def gpuhost_proxmox_vm_api_errors(spec, api):
    """spec | gpuhost.gpu.proxmox_vm_api_errors({'vms': [...], 'node': {...}, 'mappings': [...]})"""
    return _vm.api_errors(_plain.plain(spec), _plain.plain(api))


def gpuhost_proxmox_vm_config(spec, placement=None):
    """spec | gpuhost.gpu.proxmox_vm_config(placement) -> the config keys set through the API"""
    return _vm.desired_config(_plain.plain(spec), _plain.plain(placement))


def gpuhost_proxmox_vm_placement(spec, topology, api):
    """spec | gpuhost.gpu.proxmox_vm_placement(gpuhost_proxmox_node, api) -> the decision"""
    return _place.decide(_plain.plain(spec), _plain.plain(topology), _plain.plain(api))


def gpuhost_proxmox_vm_held_hugepages_mib(spec, api):
    """spec | gpuhost.gpu.proxmox_vm_held_hugepages_mib(api) -> MiB the running VM holds"""
    return _place.held_hugepages_mib(_plain.plain(spec), _plain.plain(api))


def gpuhost_proxmox_vm_root_argv(spec, placement, current):
    """spec | gpuhost.gpu.proxmox_vm_root_argv(placement, current) -> `qm set` options or []"""
    return _vm.root_argv(_plain.plain(spec), _plain.plain(placement), _plain.plain(current))


def gpuhost_proxmox_vm_diff(desired, current):
    """desired | gpuhost.gpu.proxmox_vm_diff(current) -> {key: {before, after}}"""
    return _vm.config_diff(_plain.plain(desired), _plain.plain(current))


def gpuhost_proxmox_vm_args(spec):
    """spec | gpuhost.gpu.proxmox_vm_args -> the kvm args line, or ''"""
    return _vm.args_line(_plain.plain(spec))


def gpuhost_proxmox_vm_keeper(spec):
    """spec | gpuhost.gpu.proxmox_vm_keeper -> {vmid, name} of the model disk keeper VM"""
    spec = _plain.plain(spec)
    return {"vmid": _vm.keeper_vmid(spec), "name": _vm.keeper_name(spec)}


class FilterModule:
    def filters(self):
        return {
            "proxmox_vm_spec_errors": gpuhost_proxmox_vm_spec_errors,
            "proxmox_vm_api_errors": gpuhost_proxmox_vm_api_errors,
            "proxmox_vm_config": gpuhost_proxmox_vm_config,
            "proxmox_vm_placement": gpuhost_proxmox_vm_placement,
            "proxmox_vm_root_argv": gpuhost_proxmox_vm_root_argv,
            "proxmox_vm_held_hugepages_mib": gpuhost_proxmox_vm_held_hugepages_mib,
            "proxmox_vm_diff": gpuhost_proxmox_vm_diff,
            "proxmox_vm_args": gpuhost_proxmox_vm_args,
            "proxmox_vm_keeper": gpuhost_proxmox_vm_keeper,
        }
