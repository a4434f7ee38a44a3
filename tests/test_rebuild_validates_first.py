"""A rebuild validates everything before anything is destroyed (issue 34 item 2): the real
playbooks/rebuild.yml against the Proxmox API stand-in (tests/proxmox_standin, a TEST
DOUBLE) that holds the VM running with its GPUs and model disk. Each invalid spec stops the
rebuild with an error naming the variable, and the stand-in's request log holds no write
request (POST, PUT, DELETE): no drain, no stop, no destroy; the VM is still running.

tests/test_pve_rules.py checks each of Proxmox's rules in both the product and the stand-in;
this runs a few of them through the playbook, one ansible-playbook run each."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
from proxmox_standin import specs  # noqa: E402
from proxmox_standin.pve_standin import ALL_PRIVS, PveStandin, StandinServer  # noqa: E402

PORT = 18614
WRITES = ("POST", "PUT", "DELETE")
KEY = specs.KEY
DISK = specs.DISK


def _running_vm(api):
    """VM 201 as a create left it: cloned from template 9000, two GPUs, a 200 GiB model disk."""
    api.state["vms"]["201"] = {
        "node": "pve1",
        "status": "running",
        "config": {
            "name": "gpu-vm1",
            "tags": "gpuhost",
            "cpu": "host,phys-bits=host",
            "sockets": "1",
            "cores": "4",
            "memory": "16384",
            "balloon": "0",
            "machine": "q35",
            "bios": "ovmf",
            "scsi0": "local-lvm:vm-201-disk-0,size=3G",
            "efidisk0": "local-lvm:vm-201-disk-1,efitype=4m,pre-enrolled-keys=0,size=4M",
            "ide2": "local-lvm:vm-201-cloudinit,media=cdrom",
            "scsi1": "local-lvm:vm-201-disk-2,size=200G",
            "net0": "virtio=BC:24:11:C9:00:01,bridge=vmbr0",
            "hostpci0": "mapping=gpu0,pcie=1",
            "hostpci1": "mapping=gpu1,pcie=1",
        },
    }
    api.state["volumes"]["local-lvm"] = {
        f"vm-201-disk-{n}": {"size": size, "vmid": "201", "docker": ""}
        for n, size in enumerate(["3G", "4M", "200G"])
    }


def _inventory(tmp_path, nodes=None, **overrides):
    return specs.inventory(tmp_path, PORT, nodes, **overrides)


@pytest.fixture(scope="module")
def node():
    api = PveStandin()
    secret = api.add_token("gpuhost@pve", "gpuhost", ALL_PRIVS)
    _running_vm(api)
    with StandinServer(api, PORT):
        yield api, secret


# (overrides, the error, whether the check needs the cluster's live state: an offline one
# stops before any request at all)
CASES = [
    ({"proxmox_vm_memory_mib": 131072}, "proxmox_vm_memory_mib=131072: more than node pve1", 1),
    ({"proxmox_vm_gpus": ["gpu0", "gpu9"]}, "proxmox_vm_gpus[1]='gpu9': no such PCI resource", 1),
    ({"proxmox_vm_template": "debian-13-cloud"}, "proxmox_vm_template='debian-13-cloud'", 1),
    ({"proxmox_vm_machine": "pc"}, "proxmox_vm_machine='pc': proxmox_vm_gpu_pcie", 0),
    ({"proxmox_vm_api_host": "http://127.0.0.1"}, "proxmox_vm_api_host='http://127.0.0.1'", 0),
    (
        {"proxmox_vm_model_disk": dict(DISK, size_gib=300)},
        "proxmox_vm_model_disk.size_gib=300: the model disk of the VM is 200 GiB",
        1,
    ),
]


def _rebuild(inv, secret, playbook="playbooks/rebuild.yml"):
    env = specs.play_env(secret)
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), playbook,
           "-i", str(inv), "-l", "gpu-vm1"]  # fmt: skip
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"proxmox_vm_model_disk": dict(DISK, size_gib=300), "proxmox_vm_destroy_model_disk": True},
    ],
    ids=["good", "disk-change-with-delete-model-disk"],
)
def test_control_a_valid_spec_gets_past_the_checks_to_the_first_write(tmp_path, overrides):
    """The control: the same VM with a valid spec (a model disk change is valid with
    --delete-model-disk) passes every check and the rebuild goes on to shut the VM down,
    the first write. The token here may not (no VM.PowerMgmt), so the stand-in refuses
    that request and the run ends there, the VM still running."""
    api = PveStandin()
    secret = api.add_token("gpuhost@pve", "gpuhost", [p for p in ALL_PRIVS if p != "VM.PowerMgmt"])
    _running_vm(api)
    with StandinServer(api, PORT + 1):
        proc = _rebuild(_inventory(tmp_path, proxmox_vm_api_port=PORT + 1, **overrides), secret)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "nothing was changed" not in out, out[-3000:]
    # validate_certs false is said, not silent
    assert "proxmox_vm_validate_certs is false" in out, out[-3000:]
    writes = [e for e in api.log if e["method"] in WRITES]
    assert [(e["method"], e["template"], e["status"]) for e in writes] == [
        ("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown", 403)
    ], writes
    assert api.state["vms"]["201"]["status"] == "running"


def test_no_token_secret_stops_before_any_request(tmp_path, node):
    api, _secret = node
    start = len(api.log)
    proc = _rebuild(_inventory(tmp_path), "")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "proxmox_vm_api_token_secret='': empty, but proxmox_vm_api_token_id='gpuhost'" in out
    assert api.log[start:] == []


def test_an_unreachable_node_is_blamed_on_the_node_not_the_vm(tmp_path, node):
    """The node's SSH address refuses the connection: the error names proxmox_vm_node_ssh_host
    and the address, the VM is untouched (the API saw GET requests only)."""
    api, secret = node
    start = len(api.log)
    pve = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "root"}
    inv = _inventory(tmp_path, nodes={"pve-node": pve}, proxmox_vm_node_ssh_host="pve-node")
    proc = _rebuild(inv, secret)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "proxmox_vm_node_ssh_host=pve-node: the Proxmox node is unreachable" in out, out[-3000:]
    assert "(127.0.0.1)" in out and "the VM gpu-vm1 was not touched" in out
    assert [e for e in api.log[start:] if e["method"] in WRITES] == []
    assert api.state["vms"]["201"]["status"] == "running"


def test_vm_destroy_refuses_a_vm_without_the_managed_tag(tmp_path, node):
    """`gpuhost vm destroy` identifies the VM by vmid, name and tag together."""
    api, secret = node
    start = len(api.log)
    api.state["vms"]["201"]["config"]["tags"] = "other"
    try:
        proc = _rebuild(_inventory(tmp_path), secret, "playbooks/vm_destroy.yml")
    finally:
        api.state["vms"]["201"]["config"]["tags"] = "gpuhost"
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "proxmox_vm_vmid=201: in use by VM 'gpu-vm1'" in out, out[-3000:]
    assert [e for e in api.log[start:] if e["method"] in WRITES] == []
    assert api.state["vms"]["201"]["status"] == "running"


@pytest.mark.parametrize(
    ("overrides", "words", "reads"),
    CASES,
    ids=["memory", "mapping", "template", "i440fx", "http", "disk"],
)
def test_invalid_spec_stops_the_rebuild_before_any_write(tmp_path, node, overrides, words, reads):
    api, secret = node
    before = json.dumps(api.state, sort_keys=True)
    start = len(api.log)
    proc = _rebuild(_inventory(tmp_path, **overrides), secret)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert words in out, out[-3000:]
    assert "nothing was changed" in out, out[-3000:]
    assert re.search(r"gpu-vm1\s+: ok=\d+\s+changed=0\s", proc.stdout), proc.stdout[-2000:]
    requests = api.log[start:]
    assert bool(requests) == bool(reads), requests
    assert [e for e in requests if e["method"] in WRITES] == []
    assert api.state["vms"]["201"]["status"] == "running"
    assert json.dumps(api.state, sort_keys=True) == before
