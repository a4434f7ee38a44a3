"""Placement of a GPU VM on its Proxmox node (issue 32 item 1), decided per node shape.

The node reports under tests/fixtures/proxmox-placement/ are made from machine shapes
(SOURCE.md there); each test reads one through node_topology() as role proxmox_host
publishes it, then asserts decide()'s affinity, numaN, hugepages and reasons, or its refusal
naming the variable. The stand-in part: Proxmox's own refusals for what placement sends
(root-only affinity, the cpuset format, the numaN checks at start)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_placement as pl
from proxmox_standin import specs
from proxmox_standin.pve_standin import ALL_PRIVS, PveStandin

HERE = Path(__file__).resolve().parent / "fixtures" / "proxmox-placement"


def topo(name):
    return pl.node_topology((HERE / f"{name}.txt").read_text(), "pve1")


def spec(**changes):
    base = dict(
        specs.GOOD,
        proxmox_vm_placement="auto",
        proxmox_vm_hugepages="",
        proxmox_vm_sockets=1,
        proxmox_vm_cores=8,
        proxmox_vm_memory_mib=32768,
    )
    base.update(changes)
    return base


def decide(name, api=None, **changes):
    return pl.decide(spec(**changes), topo(name), api or {})


def _reason(decision, key):
    return [r for r in decision["reasons"] if r["key"] == key and r["value"] is not None]


def test_topology_read_from_the_report():
    t = topo("two-socket-gpus-both")
    assert len(t["cpus"]) == 128 and t["numa_nodes"]["1"][:2] == [32, 33]
    cpu65 = next(c for c in t["cpus"] if c["cpu"] == 65)
    assert cpu65 == {"cpu": 65, "package": 0, "core": 1, "node": 0, "siblings": [1, 65]}
    assert t["gpus"]["gpu1"] == [
        {"path": "0000:42:00.0", "numa_node": 1, "root_port": "0000:80:01.0"}
    ]
    assert t["hugepages_free"]["0"] == {"2": 1000, "1024": 0}
    assert topo("two-socket-isolated")["isolated"] == [2, 3, 4, 5, 6, 7, 66, 67, 68, 69, 70, 71]


def test_one_socket_one_numa_node():
    d = decide("one-socket")
    assert d["errors"] == []
    assert d["root"] == {"affinity": "0-3,16-19", "hugepages": "1024"}
    assert d["config"] == {"numa": "1", "numa0": "cpus=0-7,hostnodes=0,memory=32768,policy=bind"}
    assert "4 whole cores" in _reason(d, "affinity")[0]["reason"]
    assert "node0: 64" in _reason(d, "hugepages")[0]["reason"]


def test_two_sockets_gpus_on_node0_and_hugepages_only_where_free():
    d = decide("two-socket-gpus-node0")
    assert d["root"] == {"affinity": "0-3,64-67", "hugepages": "1024"}
    assert d["config"]["numa0"] == "cpus=0-7,hostnodes=0,memory=32768,policy=bind"
    # 64 GiB needs 64 one-GiB pages on node 0, which has 40 free: no hugepages, and why
    d = decide("two-socket-gpus-node0", proxmox_vm_memory_mib=65536)
    assert d["errors"] == [] and d["root"]["hugepages"] is None
    why = next(r for r in d["reasons"] if r["key"] == "hugepages")["reason"]
    assert "node0: 40, need 64" in why


def test_two_sockets_gpus_on_both_nodes():
    d = decide("two-socket-gpus-both", proxmox_vm_sockets=2)
    assert d["errors"] == []
    assert d["root"] == {"affinity": "0-3,32-35,64-67,96-99", "hugepages": None}
    assert d["config"]["numa0"] == "cpus=0-7,hostnodes=0,memory=16384,policy=bind"
    assert d["config"]["numa1"] == "cpus=8-15,hostnodes=1,memory=16384,policy=bind"
    why = next(r for r in d["reasons"] if r["key"] == "hugepages")["reason"]
    assert "2 MiB: node0: 1000, node1: 1000, need 8192" in why


def test_gpus_on_two_nodes_with_one_socket_refused():
    d = decide("two-socket-gpus-both", proxmox_vm_sockets=1)
    assert d["errors"] and d["errors"][0].startswith("proxmox_vm_sockets=1: the GPUs sit on 2")
    assert d["errors"][0].endswith("allowed: 2")
    assert d["config"] == {} and d["root"] == {}


def test_isolated_cpus_are_left_out_with_the_reason():
    d = decide("two-socket-isolated")
    assert d["root"] == {"affinity": "0-1,8-9,64-65,72-73", "hugepages": "2"}
    assert any("isolated CPUs 2-7,66-71 left out" in r["reason"] for r in d["reasons"])


def test_other_vms_cores_are_never_reused_and_own_cores_stay():
    other = {"affinities": {"202": "0-3,64-67"}}
    assert decide("two-socket-gpus-node0", other)["root"]["affinity"] == "4-7,68-71"
    # the VM's own affinity (a re-run) and its model disk keeper's do not count against it
    own = {"affinities": {"201": "0-3,64-67", "100201": "4-7"}}
    assert decide("two-socket-gpus-node0", own)["root"]["affinity"] == "0-3,64-67"


def test_more_vcpus_than_free_cores_refused():
    other = {"affinities": {"202": "0-3,64-67"}}
    d = decide("two-socket-gpus-node0", other, proxmox_vm_cores=58)
    assert len(d["errors"]) == 1
    assert d["errors"][0].startswith("proxmox_vm_cores=58: host NUMA node 0")
    assert "28 free whole cores (56 CPUs)" in d["errors"][0] and "<= 56" in d["errors"][0]
    assert decide("two-socket-gpus-node0", other, proxmox_vm_cores=56)["errors"] == []


def test_a_rerun_counts_the_running_vms_own_hugepages():
    t = topo("two-socket-gpus-node0")
    t["hugepages_free"]["0"]["1024"] = 8  # 32 of 40 held by the VM itself
    current = {"hugepages": "1024", "numa0": "cpus=0-7,hostnodes=0,memory=32768,policy=bind"}
    running = {"vms": [{"vmid": 201, "status": "running"}], "current": current}
    assert pl.decide(spec(), t, running)["root"]["hugepages"] == "1024"
    stopped = {"vms": [{"vmid": 201, "status": "stopped"}], "current": current}
    assert pl.decide(spec(), t, stopped)["root"]["hugepages"] is None


@pytest.mark.parametrize(
    ("name", "changes", "start"),
    [
        ("two-socket-no-numa-node", {}, "proxmox_vm_gpus[0]='gpu0': the node reports no NUMA"),
        ("two-socket-gpus-node0", {"proxmox_vm_hugepages": "1024", "proxmox_vm_memory_mib": 65536},
         "proxmox_vm_hugepages='1024': not enough free hugepages"),
        ("two-socket-gpus-node0", {"proxmox_vm_extra_args": "-numa node,nodeid=0"},
         "proxmox_vm_extra_args="),
        ("two-socket-gpus-both", {"proxmox_vm_sockets": 2, "proxmox_vm_memory_mib": 32769},
         "proxmox_vm_memory_mib=32769: not divisible"),
        ("two-socket-gpus-node0", {"proxmox_vm_gpus": ["gpu0", "gpu7"]},
         "proxmox_vm_gpus[1]='gpu7': its device was not read"),
    ],
)  # fmt: skip
def test_refusals_name_the_variable(name, changes, start):
    d = decide(name, **changes)
    assert any(e.startswith(start) for e in d["errors"]), d["errors"]
    assert all("allowed" in e or "read" in e for e in d["errors"])


def test_topology_missing_or_of_another_node_refused():
    d = pl.decide(spec(), None, {})
    assert d["errors"][0].startswith("proxmox_vm_placement='auto': needs the topology of node")
    d = pl.decide(spec(proxmox_vm_node="pve2"), topo("one-socket"), {})
    assert "the one read is 'pve1'" in d["errors"][0]


def test_placement_off_manages_nothing():
    d = pl.decide(spec(proxmox_vm_placement="off"), None, {})
    assert d["errors"] == [] and d["config"] == {} and d["root"] == {}


def _standin_vm(config):
    api = PveStandin()
    api.state["nodes"]["pve1"].update(maxcpu=128, numa_nodes=2)
    api.state["vms"]["201"] = {"node": "pve1", "status": "stopped", "config": config}
    secret = api.add_token("gpuhost@pve", "gpuhost", ALL_PRIVS)
    return api, {"Authorization": f"PVEAPIToken=gpuhost@pve!gpuhost={secret}"}


def test_standin_refuses_affinity_to_a_token_and_a_bad_cpuset():
    api, token = _standin_vm({"name": "gpu-vm1", "memory": "16384"})
    url = "/api2/json/nodes/pve1/qemu/201/config"
    status, reason, _ = api.handle("PUT", url, {"affinity": "0-3"}, token, {})
    assert (status, reason) == (500, "only root can set 'affinity' config")
    api.tickets["t"] = "root@pam"
    status, _, payload = api.handle("PUT", url, {"affinity": "3-1"}, {}, {"PVEAuthCookie": "t"})
    assert status == 400 and "unable to parse cpuset option" in payload["errors"]["affinity"]
    status, _, _ = api.handle("PUT", url, {"affinity": "0-3,64-67"}, {}, {"PVEAuthCookie": "t"})
    assert status == 200


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"numa1": "cpus=8-15,hostnodes=1,memory=8192,policy=bind"},
         "total memory for NUMA nodes must be equal to vm static memory"),
        ({"numa0": "cpus=0-7,hostnodes=2,memory=16384,policy=bind"},
         "host NUMA node2 doesn't exist"),
        ({"numa0": "cpus=0-7,hostnodes=0,memory=16384"}, "you need to define a policy"),
        ({"affinity": "200-203"}, "failed to set pid's affinity"),
        (None, None),
    ],
)  # fmt: skip
def test_standin_refuses_at_start_what_qemu_server_refuses(change, says):
    good = {
        "name": "gpu-vm1",
        "memory": "16384",
        "cores": "8",
        "numa": "1",
        "numa0": "cpus=0-7,hostnodes=0,memory=16384,policy=bind",
        "affinity": "0-3,64-67",
        "hugepages": "1024",
    }
    api, _token = _standin_vm(dict(good, **(change or {})))
    node = api.state["nodes"]["pve1"]
    refusal = api._start_refusal("201", copy.deepcopy(api.state["vms"]["201"]))
    if says is None:
        assert refusal is None and node["maxcpu"] == 128
    else:
        assert refusal and says in refusal, refusal


def _validate(values):
    from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_validate as gv

    def load(path):
        return yaml.safe_load(Path(path).read_text())

    roles = str(Path(__file__).resolve().parents[1] / "roles")
    specs_, constraints = gv.load_role_specs(roles, load), gv.load_role_constraints(roles, load)
    errors = gv.validate(specs_, constraints, values, gv.plain_defaults(specs_))[0]
    return [e for e in errors if e.startswith("proxmox_vm_")]


def test_validate_refuses_auto_without_the_node_host_before_any_play():
    """playbooks/validate.yml's path: meta/constraints.yml rule, before the role runs."""
    errors = _validate({"proxmox_vm_placement": "auto"})
    assert len(errors) == 1 and errors[0].startswith("proxmox_vm_node_ssh_host: got ''")
    assert "proxmox_vm_placement is 'auto'" in errors[0]
    assert _validate({"proxmox_vm_placement": "auto", "proxmox_vm_node_ssh_host": "pve"}) == []
    assert _validate({"proxmox_vm_placement": "off"}) == []
    # a bare YAML off is false, not "off": refused naming the variable
    assert _validate({"proxmox_vm_placement": False})[0].startswith("proxmox_vm_placement")


def test_a_rebuild_counts_the_running_vms_own_hugepages_as_free():
    """A running VM holds its hugepages; a rebuild destroys it before it creates, so the node
    check counts them as free - else every rebuild of a VM that uses most of the pool stops."""
    from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_host as ph

    spec = {"proxmox_vm_vmid": 201, "proxmox_vm_hugepages": "1024"}
    api = {"vms": [{"vmid": 201, "status": "running"}],
           "current": {"hugepages": "1024", "memory": "current=65536"}}  # fmt: skip
    assert pl.held_hugepages_mib(spec, api) == 65536
    assert pl.held_hugepages_mib(spec, dict(api, vms=[{"vmid": 201, "status": "stopped"}])) == 0
    assert pl.held_hugepages_mib(dict(spec, proxmox_vm_hugepages="2"), api) == 0
    assert (
        pl.held_hugepages_mib(spec, dict(api, current={"hugepages": "1024", "memory": "8192"}))
        == 8192
    )
    facts = {"hugepages": {0: {1048576: 0}, 1: {1048576: 2}}}
    need = {"hugepages": "1024", "memory_mib": 65536}
    assert ph._hugepage_finding(facts, need)["status"] == "fail"
    found = ph._hugepage_finding(facts, dict(need, held_mib=65536))
    assert found["status"] == "pass", found
    assert "64 held by the VM itself" in found["message"]
