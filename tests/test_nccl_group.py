"""NCCL across the nodes of a serving group (issue 30): the interface check, the all-or-none
plan, the verdict of the all-reduce across the nodes (plugins/plugin_utils/
gpuhost_nccl_group.py), the interface read (module_utils/gpuhost_nccl_torch.py) and the sweep
script's input check, which runs before torch is imported (so it runs here, without torch)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.filter import gpuhost_nccl as filters
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_nccl_torch as nt
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_group as ng
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_serving_group import of_host

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "roles" / "nccl" / "files" / "gpuhost_allreduce_sweep.py"

# Rank 1 of a group of two, as every role reads it (gpuhost_serving_group.of_host).
GROUP = of_host(
    "gpu-b",
    {
        name: {
            "sglang_server_group": "big",
            "sglang_server_node_rank": -1,
            "sglang_server_group_address": address,
            "sglang_server_dist_init_port": 20000,
        }
        for name, address in (("gpu-a", "10.0.0.1"), ("gpu-b", "10.0.0.2"))
    },
)
IFACES = {
    "lo": {"addresses": ["127.0.0.1", "::1"], "speed_mbps": None},
    "eth0": {"addresses": ["192.168.1.5"], "speed_mbps": 1000},
    "eth1": {"addresses": ["10.0.0.2", "fe80::1"], "speed_mbps": 25000},
    "docker0": {"addresses": ["172.17.0.1"], "speed_mbps": None},
}


def _by_check(found):
    return {f["check"]: f for f in found}


def test_socket_ifname_selection_follows_nccl_rules():
    names = sorted(IFACES)
    assert ng.matching("eth", names) == ["eth0", "eth1"]
    assert ng.matching("=eth1", names) == ["eth1"]
    assert ng.matching("=eth", names) == []
    assert ng.matching("^docker,lo", names) == ["eth0", "eth1"]
    assert ng.matching("^=eth0", names) == ["docker0", "eth1", "lo"]
    # Unset: NCCL's own default excludes docker* and lo*.
    assert ng.matching(None, names) == ["eth0", "eth1"]


def test_a_missing_interface_fails_naming_the_variable_value_and_interfaces():
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "ens5", IFACES, "10.0.0.2", False))
    item = found["nccl.group.interface"]
    assert item["status"] == "fail"
    assert "nccl_env_overrides.NCCL_SOCKET_IFNAME: got 'ens5' on gpu-b" in item["message"]
    assert "docker0, eth0, eth1, lo" in item["message"]
    # The fix names the interface that carries the group address.
    assert "=eth1" in item["fix"]


def test_loopback_alone_is_no_interface_across_nodes():
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "lo", IFACES, "10.0.0.2", False))
    assert found["nccl.group.interface"]["status"] == "fail"


def test_an_interface_without_the_group_address_fails():
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "eth0", IFACES, "10.0.0.2", False))
    item = found["nccl.group.interface"]
    assert item["status"] == "fail"
    assert "selects eth0" in item["message"] and "10.0.0.2 is on eth1" in item["message"]


def test_the_interface_carrying_the_address_passes_and_sockets_are_a_warning():
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "eth1", IFACES, "10.0.0.2", False))
    assert found["nccl.group.interface"]["status"] == "pass"
    assert "eth1, which carries 10.0.0.2" in found["nccl.group.interface"]["message"]
    transport = found["nccl.group.transport"]
    assert transport["status"] == "warn"
    assert "over TCP sockets on eth1" in transport["message"]
    # The bandwidth to expect, from the link's speed: 25000 Mb/s = 3.12 GB/s.
    assert "~3.12 GB/s (25000 Mb/s link)" in transport["message"]
    assert "NCCL_SOCKET_IFNAME" in transport["fix"] and "NCCL_IB" in transport["fix"]


def test_infiniband_present_passes_the_transport():
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "eth1", IFACES, "10.0.0.2", True))
    assert found["nccl.group.transport"]["status"] == "pass"
    assert "NET/IB" in found["nccl.group.transport"]["message"]


def test_ipv6_group_address_is_compared_as_an_address():
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "eth1", IFACES, "FE80:0::1", False))
    assert found["nccl.group.interface"]["status"] == "pass"


def test_a_name_is_not_checked_and_unread_interfaces_warn():
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "eth1", IFACES, "gpu-b.lan", None))
    assert found["nccl.group.interface"]["status"] == "pass"
    assert "a name, not checked" in found["nccl.group.interface"]["message"]
    assert found["nccl.group.transport"]["status"] == "warn"
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "eth1", None, "10.0.0.2", False))
    assert found["nccl.group.interface"]["status"] == "warn"


def test_an_address_on_no_interface_warns():
    found = _by_check(ng.interface_findings("gpu-b", GROUP, "eth1", IFACES, "203.0.113.9", False))
    assert found["nccl.group.interface"]["status"] == "warn"
    assert "203.0.113.9 is on no interface" in found["nccl.group.interface"]["message"]


def _state(gpus=2, held=(), verify=True, torch=True):
    return {"verify": verify, "torch": torch, "gpus": gpus, "held": list(held)}


def test_the_plan_runs_only_with_every_node_here_and_free():
    hosts = ["gpu-a", "gpu-b", "other"]
    states = {"gpu-a": _state(), "gpu-b": _state()}
    assert ng.across_plan(GROUP, hosts, states) == {
        "action": "run",
        "reason": "group big: every node is here with free GPUs",
        "nproc": 2,
    }
    plan = ng.across_plan(GROUP, ["gpu-b"], states)
    assert plan["action"] == "skip" and "missing gpu-a" in plan["reason"]
    plan = ng.across_plan(
        GROUP, hosts, {"gpu-a": _state(held=["sglang-server is active"]), "gpu-b": _state()}
    )
    assert plan["action"] == "skip" and "gpu-a: sglang-server is active" in plan["reason"]
    plan = ng.across_plan(GROUP, hosts, {"gpu-a": _state(gpus=1), "gpu-b": _state()})
    assert plan["action"] == "skip" and "gpu-a 1, gpu-b 2" in plan["reason"]
    plan = ng.across_plan(GROUP, hosts, {"gpu-a": _state(verify=False), "gpu-b": _state()})
    assert plan["action"] == "skip" and "nccl_verify is false on gpu-a" in plan["reason"]
    plan = ng.across_plan(GROUP, hosts, {"gpu-a": _state(), "gpu-b": _state(torch=False)})
    assert plan["action"] == "skip" and "no torch" in plan["reason"]
    plan = ng.across_plan(GROUP, hosts, {"gpu-a": _state()})
    assert plan["action"] == "skip" and "not read on gpu-b" in plan["reason"]
    assert ng.across_plan(GROUP, hosts, states, check_mode=True)["action"] == "skip"


def test_the_filter_reads_every_members_state_from_hostvars():
    hostvars = {
        "gpu-a": {"_nccl_across_state": _state()},
        "gpu-b": {"_nccl_across_state": _state(held=["compute processes on the GPUs: pid 7 x"])},
    }
    plan = filters.nccl_across_plan(GROUP, ["gpu-a", "gpu-b"], hostvars)
    assert plan["action"] == "skip" and "gpu-b: compute processes" in plan["reason"]
    hostvars["gpu-b"]["_nccl_across_state"] = _state()
    assert filters.nccl_across_plan(GROUP, ["gpu-a", "gpu-b"], hostvars)["action"] == "run"


def test_held_reasons_are_the_sweeps_own_test():
    assert filters.nccl_held_reasons("", False) == []
    assert filters.nccl_held_reasons("", True) == ["sglang-server is active"]
    held = filters.nccl_held_reasons("4242, python3, 70000\n", False)
    assert held == ["compute processes on the GPUs: pid 4242 python3 (70000 MiB)"]


def _result(busbw, correct=True, error=None, log=()):
    rows = [
        {"bytes": 64 << 20, "time_us": 1.0, "busbw_gbps": busbw * 0.9, "correct": correct},
        {"bytes": 128 << 20, "time_us": 1.0, "busbw_gbps": busbw, "correct": True},
    ]
    return {
        "world_size": 4,
        "runs": [
            {
                "name": "derived",
                "ok": error is None,
                "error": error,
                "rows": rows,
                "nccl_log": list(log),
            }
        ],
    }


SOCKET_LOG = ["x NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0"]


def test_a_slow_link_fails_with_the_node_and_the_expectation():
    got = ng.across_evaluate(
        "gpu-b", GROUP, _result(0.4, log=SOCKET_LOG), 1.0, "eth1", False, 10000
    )
    assert got["status"] == "fail"
    assert "gpu-b (node 1 of group big, 2 nodes)" in got["message"]
    assert "peak busbw 0.40 GB/s, threshold 1 GB/s" in got["diagnosis"]
    assert "NET/Socket/0" in got["diagnosis"]
    assert "over TCP sockets on eth1" in got["diagnosis"] and "~1.25 GB/s" in got["diagnosis"]
    assert "with InfiniBand" in got["diagnosis"]


def test_a_fast_enough_link_passes_and_wrong_sums_fail():
    got = ng.across_evaluate("gpu-b", GROUP, _result(2.0, log=SOCKET_LOG), 1.0, "eth1", False)
    assert got["status"] == "pass" and got["peak_busbw_gbps"] == 2.0
    got = ng.across_evaluate("gpu-b", GROUP, _result(2.0, correct=False), 1.0, "eth1", False)
    assert got["status"] == "fail" and "wrong sums at 67108864 bytes" in got["message"]


def test_a_node_that_never_joined_fails_naming_it():
    error = "rank(s) 2, 3 (node(s) 1) never joined at 10.0.0.1:20000 within 60 s"
    got = ng.across_evaluate("gpu-a", GROUP, _result(0, error=error), 1.0, "eth1", False)
    assert got["status"] == "fail" and "node(s) 1" in got["message"]
    assert "10.0.0.1:20000" in got["diagnosis"]
    assert ng.across_findings(got)[0]["status"] == "fail"
    skipped = ng.across_findings(None, "group big: check mode")
    assert skipped[0]["status"] == "warn" and skipped[0]["check"] == "nccl.group.across"


def test_expected_socket_bandwidth_is_the_link_in_bytes():
    assert ng.expected_socket_gbps(100000) == 12.5
    assert ng.expected_socket_gbps(-1) is None and ng.expected_socket_gbps(None) is None


# --- the interface read (module_utils, runs on the host) -----------------------------------


class FakeRunner:
    """Test double of module.run_command: records the argv, answers a canned result."""

    def __init__(self, rc=0, out=""):
        self.calls, self.answer = [], (rc, out, "")

    def __call__(self, argv):
        self.calls.append(argv)
        return self.answer


IP_JSON = json.dumps(
    [
        {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1"}]},
        {
            "ifname": "eth1",
            "addr_info": [{"family": "inet", "local": "10.0.0.2"}, {"family": "inet6"}],
        },
    ]
)


def test_interfaces_are_read_from_sys_and_ip(tmp_path):
    for name, speed in (("lo", None), ("eth1", "25000"), ("eth2", "-1")):
        (tmp_path / name).mkdir()
        if speed:
            (tmp_path / name / "speed").write_text(speed + "\n")
    run = FakeRunner(out=IP_JSON)
    got = nt.interfaces("/usr/sbin/ip", run, str(tmp_path))
    assert run.calls == [["/usr/sbin/ip", "-j", "addr", "show"]]
    assert got == {
        "eth1": {"addresses": ["10.0.0.2"], "speed_mbps": 25000},
        "eth2": {"addresses": [], "speed_mbps": None},
        "lo": {"addresses": ["127.0.0.1"], "speed_mbps": None},
    }
    # Without ip the names stay, the addresses are unknown (not "none").
    assert nt.interfaces(None, run, str(tmp_path))["eth1"]["addresses"] is None
    assert nt.interfaces("/usr/sbin/ip", FakeRunner(rc=1), str(tmp_path))["lo"]["addresses"] is None
    assert nt.interfaces("/usr/sbin/ip", run, str(tmp_path / "absent")) is None
    assert nt.parse_ip_json("Error: x") is None


@pytest.mark.skipif(not shutil.which("ip"), reason="needs iproute2's ip")
def test_this_machines_interfaces_read_for_real():
    def run(argv):
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
        return out.returncode, out.stdout, out.stderr

    got = nt.interfaces(shutil.which("ip"), run)
    assert "127.0.0.1" in got["lo"]["addresses"]
    assert set(got) == set(os.listdir("/sys/class/net"))


# --- the sweep script's input check (before torch) -----------------------------------------


def _script():
    spec = importlib.util.spec_from_file_location("gpuhost_allreduce_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GOOD = {"nnodes": 2, "node_rank": 1, "nproc": 8, "master_addr": "10.0.0.1", "master_port": 20000}


def test_the_script_accepts_a_group_and_ignores_a_host_alone():
    check = _script().check_group
    assert check(dict(GOOD)) == []
    assert check(dict(GOOD, master_addr="[fd00::1]")) == []
    assert check(dict(GOOD, master_addr="gpu-a.lan")) == []
    assert check({"nproc": 2}) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"node_rank": 2}, "node_rank: got 2; allowed: 0..1"),
        ({"node_rank": -1}, "node_rank: got -1; allowed: 0..1"),
        ({"nnodes": 1}, "nnodes: got 1; allowed: 2 or more"),
        ({"master_addr": "127.0.0.1"}, "master_addr: got '127.0.0.1', a loopback address"),
        ({"master_addr": "::1"}, "a loopback address"),
        ({"master_addr": "localhost"}, "a loopback address"),
        ({"master_addr": "a b;c"}, "allowed: rank 0's IP address or host name"),
        ({"master_port": 70000}, "master_port: got 70000; allowed: 1..65535"),
        ({"nproc": 0}, "nproc: got 0"),
        ({"candidates": [{"name": "a"}, {"name": "b"}]}, "exactly one across nodes"),
    ],
)
def test_the_script_refuses_bad_group_input(change, expected):
    problems = _script().check_group(dict(GOOD, **change))
    assert any(expected in p for p in problems), problems


def test_bad_input_exits_2_with_the_message_before_torch():
    # The dev venv has no torch: exit status 2 and the message prove the check runs first.
    bad = dict(GOOD, node_rank=5, master_addr="127.0.0.1")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--config", json.dumps(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "node_rank: got 5; allowed: 0..1" in out.stderr
    assert "loopback" in out.stderr and out.stdout == ""
