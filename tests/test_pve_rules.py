"""The rules Proxmox applies to a VM spec, one table (issue 34 item 2), each row checked twice:

- the product refuses the bad spec before any request: spec_errors() (offline) or
  api_errors() against the cluster's live state, read from the stand-in with GET requests the
  way plugins/modules/proxmox_facts.py reads it; the refusal names the variable and its value;
- the Proxmox API stand-in (tests/proxmox_standin/pve_standin.py, a TEST DOUBLE) refuses the
  request the spec turns into, at the request where Proxmox does (clone = the create, config,
  or the start task), with Proxmox's message, and lets every earlier request through.

A control row (the good spec) goes through clone, config and start on the stand-in and through
both product checks, so a row passes only because of its one bad field.

Sources: the API schema is Proxmox's own (data/proxmox/pve-api-9.1.3.json, from pve-docs
api-viewer/apidata.js, browsable at https://pve.proxmox.com/pve-docs/api-viewer/); the
rest is qemu-server and pve-storage code on https://git.proxmox.com/ (?p=qemu-server.git,
?p=pve-storage.git), named by file and function. docs/proxmox.md lists the same rules.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_proxmox_vm import (
    _PCI_ADDR,
    api_errors,
    desired_config,
    keeper_vmid,
    root_config,
    spec_errors,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_pve_schema import load_facts
from proxmox_standin import specs
from proxmox_standin.pve_standin import ALL_PRIVS, PveStandin

ROOT = Path(__file__).resolve().parents[1]
FACTS = load_facts()
GOOD = dict(specs.GOOD, proxmox_vm_cores=8, proxmox_vm_model_disk=specs.DISK)

SCHEMA = "PVE API schema (pve-docs api-viewer/apidata.js, data/proxmox/pve-api-9.1.3.json)"
QEMU_PM = "qemu-server PVE/QemuServer.pm"
PCI_PM = "qemu-server PVE/QemuServer/PCI.pm"
API_QEMU = "qemu-server PVE/API2/Qemu.pm"
STORAGE_PM = "pve-storage PVE/Storage.pm"


def _gpu1_on_other_node(state):
    state["mappings"][1]["map"] = [state["mappings"][1]["map"][0].replace("pve1", "pve2")]


def _db_holds_gpu1(state):
    state["vms"]["150"]["config"]["hostpci0"] = "mapping=gpu1"


def _template_deleted(state):
    del state["vms"]["9000"]


@dataclass
class Rule:
    name: str
    rule: str
    source: str
    spec: dict
    step: str  # the request Proxmox refuses: clone (the create), config or start
    says: str  # Proxmox's message (a part of it)
    var: str  # the variable the product names
    value: Any  # and its value
    state: Callable | None = field(default=None)


RULES = [
    Rule("vcpus", "sockets x cores at most the node's CPUs",
         f"{QEMU_PM} config_to_command: 'MAX %d vcpus allowed per VM on this node'",
         {"proxmox_vm_sockets": 2, "proxmox_vm_cores": 24}, "start",
         "MAX 32 vcpus allowed per VM on this node", "proxmox_vm_cores", 24),
    Rule("pcie-needs-q35", "hostpciN pcie=1 needs a q35 machine",
         f"{PCI_PM} parse_hostpci_devices (machine_type_is_q35): 'q35 machine model is not "
         "enabled'",
         {"proxmox_vm_machine": "pc"}, "start", "q35 machine model is not enabled",
         "proxmox_vm_machine", "pc"),
    Rule("hugepages-need-numa", "hugepages need numa=1",
         "qemu-server PVE/QemuServer/Memory.pm config: 'numa needs to be enabled to use "
         "hugepages'",
         {"proxmox_vm_numa": False}, "start", "numa needs to be enabled to use hugepages",
         "proxmox_vm_hugepages", "1024"),
    Rule("mapping-exists", "a hostpciN mapping exists",
         f"{PCI_PM} parse_hostpci (PVE::Mapping::PCI::find_on_current_node): 'PCI device "
         "mapping not found for '%s''",
         {"proxmox_vm_gpus": ["gpu0", "gpu9"]}, "start",
         "PCI device mapping not found for 'gpu9'", "proxmox_vm_gpus[1]", "gpu9"),
    Rule("mapping-on-node", "the mapping has a device on the VM's node",
         f"{PCI_PM} parse_hostpci (find_on_current_node finds none): 'PCI device mapping not "
         "found for '%s''",
         {}, "start", "PCI device mapping not found for 'gpu1'", "proxmox_vm_gpus[1]", "gpu1",
         _gpu1_on_other_node),
    Rule("device-free", "no running VM holds the device",
         f"{PCI_PM} reserve_pci_usage: \"PCI device '%s' already in use by VMID '%s'\"",
         {}, "start", "PCI device '0000:02:00.0' already in use by VMID '150'",
         "proxmox_vm_gpus[1]", "gpu1", _db_holds_gpu1),
    Rule("memory-fits-node", "with passthrough all guest memory is pinned: at most the node's",
         f"{QEMU_PM} vm_start_nolock: 'start failed: QEMU exited with code 1' (QEMU cannot "
         "pin the memory for VFIO; https://pve.proxmox.com/wiki/PCI_Passthrough)",
         {"proxmox_vm_memory_mib": 131072}, "start", "start failed: QEMU exited with code 1",
         "proxmox_vm_memory_mib", 131072),
    Rule("disk-storage-exists", "a new disk's storage exists",
         f"{STORAGE_PM} storage_config: 'storage '%s' does not exist'",
         {"proxmox_vm_model_disk": {"slot": "scsi1", "storage": "tank", "size_gib": 200}},
         "config", "storage 'tank' does not exist", "proxmox_vm_model_disk.storage", "tank"),
    Rule("disk-storage-images", "a new disk's storage holds VM images (content images)",
         f"{API_QEMU} create_disks/check_storage_access, {STORAGE_PM}: 'storage %s does not "
         "support vm images'",
         {"proxmox_vm_model_disk": {"slot": "scsi1", "storage": "local", "size_gib": 200}},
         "config", "does not support vm images", "proxmox_vm_model_disk.storage", "local"),
    Rule("clone-storage-exists", "the clone's target storage exists",
         f"{API_QEMU} clone_vm (storage_check_enabled / storage_config)",
         {"proxmox_vm_clone_storage": "tank"}, "clone", "storage 'tank' does not exist",
         "proxmox_vm_clone_storage", "tank"),
    Rule("template-exists", "the template to clone exists",
         f"{API_QEMU} clone_vm (PVE::QemuConfig->load_config of the source): 'Configuration "
         "file '%s' does not exist'",
         {}, "clone", "qemu-server/9000.conf' does not exist", "proxmox_vm_template",
         "debian-12-cloud", _template_deleted),
    Rule("vmid-free", "the new vmid is not in use",
         f"{API_QEMU} clone_vm (create_and_lock_config): 'unable to create VM %d: config "
         "file already exists'",
         {"proxmox_vm_vmid": 150}, "clone", "config file already exists", "proxmox_vm_vmid",
         150),
    Rule("vmid-range", "a vmid is 100 - 999999999",
         f"{SCHEMA}: newid format pve-vmid", {"proxmox_vm_vmid": 99}, "clone",
         "Parameter verification failed.", "proxmox_vm_vmid", 99),
    Rule("cpu-phys-bits", "cpu phys-bits is 8-64 or host",
         f"{SCHEMA}: cpu format pve-vm-cpu-conf, phys-bits",
         {"proxmox_vm_cpu": "host,phys-bits=99"}, "config", "Parameter verification failed.",
         "proxmox_vm_cpu", "host,phys-bits=99"),
    Rule("hostpci-count", "at most 16 devices (hostpci0-15)",
         f"{SCHEMA}: hostpci[n], n 0-15",
         {"proxmox_vm_gpus": [f"gpu{i}" for i in range(17)]}, "config",
         "Parameter verification failed.", "proxmox_vm_gpus", [f"gpu{i}" for i in range(17)]),
    Rule("disk-slot", "a disk slot is scsi0-30, virtio0-15, sata0-5 or ide0-3",
         f"{SCHEMA}: scsi[n], n 0-30",
         {"proxmox_vm_model_disk": {"slot": "scsi31", "storage": "local-lvm", "size_gib": 200}},
         "config", "Parameter verification failed.", "proxmox_vm_model_disk.slot", "scsi31"),
    Rule("args-root-only", "only root@pam sets args (an API token is refused)",
         f"{API_QEMU} check_vm_modify_config_perm: 'only root can set '%s' config'",
         {"proxmox_vm_gpu_clique": True, "proxmox_vm_node_ssh_host": ""}, "config",
         "only root can set 'args' config", "proxmox_vm_node_ssh_host", ""),
    Rule("hugepages-root-only", "only root@pam sets hugepages (an API token is refused)",
         f"{API_QEMU} check_vm_modify_config_perm (hugepages in no privilege class): 'only "
         "root can set '%s' config'",
         {"proxmox_vm_node_ssh_host": ""}, "config", "only root can set 'hugepages' config",
         "proxmox_vm_node_ssh_host", ""),
    Rule("raw-pci-root-only", "only root@pam passes a device by address",
         f"{API_QEMU} check_hostpci_perm: 'only root can set '%s' config for non-mapped "
         "devices'",
         {"proxmox_vm_gpus": ["0000:01:00.0"]}, "config",
         "only root can set 'hostpci0' config for non-mapped devices", "proxmox_vm_gpus[0]",
         "0000:01:00.0"),
]  # fmt: skip


class Node:
    """The stand-in called as proxmoxer calls Proxmox (no HTTP), with docs/rebuild.md's token."""

    def __init__(self, tweak=None):
        self.api = PveStandin()
        if tweak:
            tweak(self.api.state)
        self.secret = self.api.add_token("gpuhost@pve", "gpuhost", ALL_PRIVS)

    def call(self, method, path, params=None, root=False):
        """As the API token, or (root) as root@pam the way `qm` on the node acts."""
        params = {k: str(v) for k, v in (params or {}).items()}
        url = "/api2/json" + path
        if method == "GET" and params:
            url, params = f"{url}?{urlencode(params)}", {}
        headers = {"Authorization": f"PVEAPIToken=gpuhost@pve!gpuhost={self.secret}"}
        cookies = {}
        if root:
            self.api.tickets["qm-on-the-node"] = "root@pam"
            headers, cookies = {}, {"PVEAuthCookie": "qm-on-the-node"}
        status, reason, payload = self.api.handle(method, url, params, headers, cookies)
        errors = payload.get("errors")
        return status, reason + (f" {json.dumps(errors)}" if errors else ""), payload["data"]

    def get(self, path, **params):
        status, message, data = self.call("GET", path, params)
        assert status == 200, (path, message)
        return data

    def facts(self, v):
        """What plugins/modules/proxmox_facts.py returns, read the same way (GET only)."""
        vms = [x for x in self.get("/cluster/resources", type="vm") if x["type"] == "qemu"]
        by_id = {int(x["vmid"]): x for x in vms}

        def config(vmid):
            vm = by_id.get(int(vmid or 0))
            return self.get(f"/nodes/{vm['node']}/qemu/{vmid}/config") if vm else None

        named = [x for x in vms if x["name"] == v["proxmox_vm_template"]]
        node = v["proxmox_vm_node"]
        return {
            "vms": vms,
            "node": next((n for n in self.get("/nodes") if n["node"] == node), None),
            "mappings": self.get("/cluster/mapping/pci"),
            "storages": self.get("/cluster/resources", type="storage"),
            "configs": {
                str(x["vmid"]): config(x["vmid"])
                for x in vms
                if x["node"] == node and x["status"] == "running"
            },
            "current": config(v["proxmox_vm_vmid"]),
            "keeper": config(keeper_vmid(v)),
            "template": config(named[0]["vmid"]) if len(named) == 1 else None,
            "purpose": "create",
        }

    def create(self, v):
        """The requests the spec turns into, in the role's order: clone, config (hardware,
        GPUs, cloud-init, args, the model disk), start. -> (the refused step, Proxmox's
        message), or (None, '') when Proxmox took them all."""
        node, vmid = v["proxmox_vm_node"], v["proxmox_vm_vmid"]
        names = {x["config"].get("name"): k for k, x in self.api.state["vms"].items()}
        # the template's vmid as the inventory last saw it (9000 in default_state)
        source = names.get(v["proxmox_vm_template"], "9000")
        clone = {"newid": vmid, "name": v["proxmox_vm_name"], "full": 1}
        if v.get("proxmox_vm_clone_storage"):
            clone["storage"] = v["proxmox_vm_clone_storage"]
        status, message, _ = self.call("POST", f"/nodes/{node}/qemu/{source}/clone", clone)
        if status != 200:
            return "clone", message
        cfg = desired_config(v)
        for i, gpu in enumerate(v.get("proxmox_vm_gpus") or []):
            if _PCI_ADDR.fullmatch(gpu):  # what a raw address means: host=, not mapping=
                cfg[f"hostpci{i}"] = cfg[f"hostpci{i}"].replace("mapping=", "host=")
        # the root-only options: `qm set` as root on the node when the spec names its host
        # (the product refuses the spec otherwise), else what a token sending them gets
        root = root_config(v)
        if not v.get("proxmox_vm_node_ssh_host"):
            cfg.update(root)
        disk = v["proxmox_vm_model_disk"]
        cfg[disk["slot"]] = f"{disk['storage']}:{disk['size_gib']}"
        status, message, _ = self.call("PUT", f"/nodes/{node}/qemu/{vmid}/config", cfg)
        if status != 200:
            return "config", message
        if root and v.get("proxmox_vm_node_ssh_host"):
            path = f"/nodes/{node}/qemu/{vmid}/config"
            status, message, _ = self.call("PUT", path, root, root=True)
            if status != 200:
                return "config", message
        status, message, upid = self.call("POST", f"/nodes/{node}/qemu/{vmid}/status/start")
        if status != 200:
            return "start", message
        task = self.get(f"/nodes/{node}/tasks/{upid}/status")
        return (None, "") if task["exitstatus"] == "OK" else ("start", task["exitstatus"])


def _spec(changes):
    out = copy.deepcopy(GOOD)
    out.update(copy.deepcopy(changes))
    return out


def _product_errors(node, v):
    return spec_errors(v, FACTS) + api_errors(v, node.facts(v))


def test_the_good_spec_passes_both_and_proxmox_takes_every_request():
    node = Node()
    assert _product_errors(node, GOOD) == []
    assert node.create(GOOD) == (None, "")
    assert node.api.state["vms"]["201"]["status"] == "running"


def test_every_rule_names_a_source_and_a_request():
    assert len({r.name for r in RULES}) == len(RULES)
    for rule in RULES:
        assert rule.step in ("clone", "config", "start"), rule.name
        assert rule.source and rule.rule and rule.says, rule.name


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_product_and_standin_refuse_the_same_rule(rule):
    v = _spec(rule.spec)
    node = Node(rule.state)
    # the product: before any request, naming the variable and its value
    errors = _product_errors(node, v)
    named = f"{rule.var}={rule.value!r}"
    assert any(e.startswith(named) for e in errors), (named, errors)
    writes = [e for e in node.api.log if e["method"] != "GET"]
    assert writes == []
    # the stand-in: the same refusal at the request where Proxmox refuses, not earlier
    step, message = node.create(v)
    assert step == rule.step, (rule.name, step, message)
    assert rule.says in message, (rule.name, message)
    if step == "start":
        assert node.api.state["vms"][str(v["proxmox_vm_vmid"])]["status"] == "stopped"
