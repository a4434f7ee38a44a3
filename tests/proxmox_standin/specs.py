"""The VM spec the Proxmox tests start from, written once: a valid gpu-vm1 (vmid 201 on node
pve1, cloned from debian-12-cloud, two mapped GPUs, a 200 GiB model disk on scsi1), as a spec
for the pure checks (GOOD) and as an inventory for the playbook runs against the API
stand-in (inventory()). Each test overrides only what it is about."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = yaml.safe_load((ROOT / "roles/proxmox_vm/defaults/main.yml").read_text())
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuaG9zdHRlc3RrZXkAAAAAAAAAAAAAAAAAAAAAAAAA test"
DISK = {"slot": "scsi1", "storage": "local-lvm", "size_gib": 200}

# What the inventory says about the VM, API endpoint aside.
VM = {
    "proxmox_vm_api_host": "127.0.0.1",
    "proxmox_vm_api_user": "gpuhost@pve",
    "proxmox_vm_api_token_id": "gpuhost",
    "proxmox_vm_node": "pve1",
    "proxmox_vm_vmid": 201,
    "proxmox_vm_template": "debian-12-cloud",
    "proxmox_vm_memory_mib": 16384,
    "proxmox_vm_ssh_keys": [KEY],
    "proxmox_vm_gpus": ["gpu0", "gpu1"],
    "proxmox_vm_model_disk": DISK,
}

# The spec as the role sees it (its defaults under the inventory), for the pure checks; no
# model disk (the tests about it add DISK).
GOOD = dict(
    DEFAULTS,
    **{k: v for k, v in VM.items() if k != "proxmox_vm_model_disk"},
    proxmox_vm_api_token_secret="***",
    proxmox_vm_name="gpu-vm1",
    proxmox_vm_numa=True,
    # hugepages is root-only in Proxmox: the role sets it with qm set on the node's host
    proxmox_vm_hugepages="1024",
    proxmox_vm_node_ssh_host="pve-node",
)


def inventory(tmp_path: Path, port: int, nodes: dict | None = None, **overrides) -> Path:
    """hosts.yml with gpu-vm1 in proxmox_vms (a local connection: the modules talk to the
    stand-in on 127.0.0.1:port), and the nodes' hosts in proxmox_nodes when given."""
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        **VM,
        "proxmox_vm_api_port": port,
        "proxmox_vm_validate_certs": False,
        "proxmox_vm_cores": 4,
        **overrides,
    }
    groups: dict = {"proxmox_vms": {"hosts": {"gpu-vm1": host}}}
    if nodes:
        groups["proxmox_nodes"] = {"hosts": nodes}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps(groups))
    return path


def play_env(secret: str, **extra: str) -> dict[str, str]:
    """The environment of an ansible-playbook run against the API stand-in: the repository's
    ansible.cfg, the token secret where the role reads it, plain output; `extra` on top."""
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        GPUHOST_PROXMOX_TOKEN_SECRET=secret,
        ANSIBLE_FORCE_COLOR="0",
        PYTHONWARNINGS="ignore",
        **extra,
    )
