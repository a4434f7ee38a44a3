"""Placement through the role: playbooks/vm.yml with proxmox_vm_placement auto against the
Proxmox API stand-in (tests/proxmox_standin, a TEST DOUBLE), the real ansible-playbook and the
real community.proxmox modules. The node's topology is the fact role proxmox_host publishes
(gpuhost_proxmox_node), made here from a fixture report (tests/fixtures/proxmox-placement/)
and given as the VM host's variable, so the role does not read the test machine's own sysfs;
the root-only options go through the `qm` stand-in on the node host (a local connection), as
root@pam, the way the real `qm set` on the node does.

One two-socket node, three GPUs behind socket 0 and one behind socket 1, two VMs converged one
after the other: the one-GPU VM gets whole cores of node 0, numa0 bound to node 0 and 1 GiB
hugepages (free there); the VM with a GPU behind each socket gets two guest NUMA nodes, cores
of both host nodes that the first VM does not have, and no hugepages (not free on node 1),
with the reason. A second run changes nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_placement as pl
from proxmox_standin import specs
from proxmox_standin.pve_standin import ALL_PRIVS, PveStandin, StandinServer

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "proxmox-placement"
PORT = 18614
ROOT_PW = "gpuhost-test-root-pw-3e1a"


def _standin(fixture):
    """A node with the fixture's CPUs and NUMA nodes, and its GPU mappings."""
    api = PveStandin()
    report = (FIXTURES / f"{fixture}.txt").read_text()
    mappings = json.loads(report.split("### mappings\n", 1)[1].split("\n", 1)[0])
    api.state["mappings"] = [dict(m, description="") for m in mappings]
    api.state["nodes"]["pve1"].update(maxcpu=128, maxmem=512 * 1024**3, numa_nodes=2)
    api.state["passwords"]["root@pam"] = ROOT_PW
    return api, api.add_token("gpuhost@pve", "gpuhost", ALL_PRIVS), report


def _inventory(tmp_path, report, vms):
    """proxmox_vms: the given VMs (name -> overrides); proxmox_nodes: the node's host."""
    hosts = {}
    for name, overrides in vms.items():
        host = json.loads(specs.inventory(tmp_path, PORT).read_text())["proxmox_vms"]["hosts"]
        host = dict(host["gpu-vm1"], proxmox_vm_name=name, **overrides)
        host.update(
            proxmox_vm_placement="auto",
            proxmox_vm_node_ssh_host="pve-node",
            proxmox_vm_memory_mib=16384,
            gpuhost_proxmox_node=pl.node_topology(report, "pve1"),
        )
        hosts[name] = host
    node = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        json.dumps(
            {
                "proxmox_vms": {"hosts": hosts},
                "proxmox_nodes": {"hosts": {"pve-node": node}},
            }
        )
    )
    return inv


def _play(inv, secret):
    env = specs.play_env(
        secret,
        PATH=f"{ROOT / 'tests' / 'proxmox_standin' / 'bin'}:{os.environ['PATH']}",
        GPUHOST_QM_STANDIN_URL=f"https://127.0.0.1:{PORT}",
        GPUHOST_QM_STANDIN_NODE="pve1",
        GPUHOST_QM_STANDIN_PASSWORD=ROOT_PW,
    )
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/vm.yml", "-i", inv]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    recap = re.findall(
        r"(gpu-vm\d)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", proc.stdout
    )
    assert recap, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, {h: (int(c), int(f)) for h, c, f in recap}


@pytest.fixture()
def node():
    api, secret, report = _standin("two-socket-four-gpus")
    with StandinServer(api, PORT):
        yield api, secret, report


def test_two_vms_get_disjoint_whole_cores_next_to_their_gpus_then_nothing_changes(tmp_path, node):
    api, secret, report = node
    inv = _inventory(
        tmp_path,
        report,
        {
            "gpu-vm1": {"proxmox_vm_gpus": ["gpu0"]},
            "gpu-vm2": {
                "proxmox_vm_gpus": ["gpu1", "gpu3"],
                "proxmox_vm_vmid": 202,
                "proxmox_vm_sockets": 2,
            },
        },
    )
    proc, recap = _play(inv, secret)
    assert [f for _c, f in recap.values()] == [0, 0], proc.stdout[-4000:]
    vms = [api.state["vms"][str(v)] for v in (201, 202)]
    assert [vm["status"] for vm in vms] == ["running"] * 2
    one, two = (vm["config"] for vm in vms)
    # its GPU on node 0: whole cores of node 0 (siblings n and n+64), numa0 bound there
    assert one["affinity"] == "0-1,64-65"
    assert one["numa"] == "1" and one["hugepages"] == "1024"
    assert one["numa0"] == "cpus=0-3,hostnodes=0,memory=16384,policy=bind"
    assert "numa1" not in one
    # a GPU behind each socket: two guest NUMA nodes, each bound to its GPU's host node, on
    # cores of both host nodes that the first VM does not have
    assert two["affinity"] == "2-3,32-33,66-67,96-97"
    assert two["numa0"] == "cpus=0-3,hostnodes=0,memory=8192,policy=bind"
    assert two["numa1"] == "cpus=4-7,hostnodes=1,memory=8192,policy=bind"
    # 8192 MiB per node: node 1 has no 1 GiB page and 1000 of the 4096 2 MiB pages: none
    assert "hugepages" not in two
    assert "none: not enough free pages" in proc.stdout
    # the decisions and their reasons are shown to the user
    assert "whole cores (SMT siblings together) of host NUMA node 0" in proc.stdout
    # root-only options were set as root@pam (qm on the node), the rest by the token
    root_puts = [e for e in api.log if e["method"] == "PUT" and "affinity" in e["params"]]
    assert len(root_puts) == 2 and {e["user"] for e in root_puts} == {"root@pam"}
    assert [e for e in api.log if e["status"] != 200] == []

    proc, recap = _play(inv, secret)
    assert recap == {"gpu-vm1": (0, 0), "gpu-vm2": (0, 0)}, proc.stdout[-4000:]
