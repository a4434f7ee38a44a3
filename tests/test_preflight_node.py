"""playbooks/preflight.yml (the preflight stage of `gpuhost check` and site.yml) reads the
Proxmox node under a GPU host that is a Proxmox VM, for a VM that runs there now; the real
ansible-playbook in check mode, this machine standing in for every host over a local
connection (no pvesh here, so the node's mappings read as unreadable, which is a warn for a
running VM; its /sys is read as a node's):

- `pvevm` (proxmox_vm_node_ssh_host: pve-node, a VM with 1 GiB hugepages): the node's
  findings join the guest's, judged for a running VM (hugepages not judged, no fail);
- `lostvm` (its node pve-gone: SSH to a closed port): the node was not read, one warn that
  says so, and the guest's findings are all there;
- `bare` (no proxmox_vm_node_ssh_host, like inventory/local and the sandbox): no node
  finding, nothing read on any node.
Nothing changes (changed=0). About 10 s."""

from __future__ import annotations

import json
import os
import sys

from gpuhost_fakes import run_playbook

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
VM = {
    **LOCAL,
    "proxmox_vm_node": "pve1",
    "proxmox_vm_gpus": ["gpu0", "gpu1"],
    "proxmox_vm_memory_mib": 65536,
    "proxmox_vm_hugepages": "1024",
}


def _inventory(tmp_path):
    inv = {
        "gpu_hosts": {
            "hosts": {
                "pvevm": {**VM, "proxmox_vm_node_ssh_host": "pve-node"},
                "lostvm": {**VM, "proxmox_vm_node_ssh_host": "pve-gone"},
                "bare": dict(LOCAL),
            }
        },
        "proxmox_nodes": {
            "hosts": {
                "pve-node": dict(LOCAL),
                "pve-gone": {
                    "ansible_connection": "ssh",
                    "ansible_host": "127.0.0.1",
                    "ansible_port": 1,
                    "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes",
                },
            }
        },
    }
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(inv))
    return path


def _run(stdout):
    """The json callback's document (profile_tasks prints its recap after it)."""
    return json.JSONDecoder().raw_decode(stdout[stdout.index("{") :])[0]


def _findings(run):
    """{host: the last gpuhost_findings a task set}."""
    out = {}
    for play in run["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                facts = result.get("ansible_facts") or {}
                if "gpuhost_findings" in facts:
                    out[host] = facts["gpuhost_findings"]
    return out


def test_preflight_reads_the_node_of_a_proxmox_vm_only(tmp_path):
    proc = run_playbook(
        [
            "playbooks/preflight.yml",
            "--check",
            "-i",
            _inventory(tmp_path),
            "-e",
            "preflight_fail_on_findings=false",
        ],
        tmp_path / "facts",
        env={
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_HOST_KEY_CHECKING": "False",
            "ANSIBLE_SSH_RETRIES": "0",
            "HOME": os.environ.get("HOME", str(tmp_path)),
        },
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    run = _run(proc.stdout)
    stats = run["stats"]
    assert set(stats) == {"pvevm", "lostvm", "bare"}, stats
    assert all(s["changed"] == 0 and s["failures"] == 0 for s in stats.values()), stats
    assert all(s["unreachable"] == 0 for s in stats.values()), stats
    found = _findings(run)

    def checks(host, prefix):
        return {f["check"]: f for f in found[host] if f["check"].startswith(prefix)}

    # the VM's node: read, judged for a running VM
    node = checks("pvevm", "proxmox_host.")
    assert {"proxmox_host.iommu", "proxmox_host.cpu_governor", "proxmox_host.cstates"} <= set(node)
    assert node["proxmox_host.hugepages"]["message"].startswith("not judged for a running VM")
    assert node["proxmox_host.mappings"]["status"] == "warn"
    assert "proxmox_host.node" not in node
    assert not [f for f in node.values() if f["status"] == "fail"]
    assert checks("pvevm", "preflight.") and checks("pvevm", "proxmox_guest.")

    # an unreachable node: said so, the guest's findings stand
    lost = checks("lostvm", "proxmox_host.")
    assert list(lost) == ["proxmox_host.node"]
    assert lost["proxmox_host.node"]["status"] == "warn"
    assert lost["proxmox_host.node"]["message"].startswith(
        "the Proxmox node was not read: proxmox_vm_node_ssh_host=pve-gone (127.0.0.1): "
    )
    assert set(checks("lostvm", "preflight.")) == set(checks("pvevm", "preflight."))
    assert checks("lostvm", "proxmox_guest.")

    # no Proxmox node: nothing read, nothing said
    assert checks("bare", "preflight.") and not checks("bare", "proxmox_host.")
