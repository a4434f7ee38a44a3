"""Guest-side checks of issue 32: steal time (/proc/stat read twice) and the GPUs' NUMA node
against the NUMA nodes with the host's CPUs. The collector runs on a real temp tree through
the product's Probe, with a test double for the sleep between the reads that writes the
second /proc/stat; the findings run on those facts and on the real KVM guest capture
tests/fixtures/gpu-hosts/h100x1-kvm-cpu/ (SOURCE.md there). The /proc/stat pairs are made,
in proc(5)'s format."""

from __future__ import annotations

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_cpu_stat import (
    UNKNOWN,
    collect_cpu,
    parse_cpulist,
    parse_proc_stat,
    steal_between,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import Probe
from ansible_collections.gpuhost.gpu.plugins.modules.gpu_facts import gather
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_guest_checks import (
    numa_findings,
    steal_findings,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_preflight import (
    preflight_findings,
)
from gpuhost_fakes import load_fixture

# user nice system idle iowait irq softirq steal guest guest_nice (USER_HZ ticks)
BEFORE = """cpu  10000 0 2000 80000 100 0 50 400 0 0
cpu0 5000 0 1000 40000 50 0 25 0 0 0
cpu1 5000 0 1000 40000 50 0 25 400 0 0
intr 123456 0 9 0
ctxt 987654
"""
# one second later on 2 CPUs (200 ticks): cpu1 lost 30 of its 100 ticks to steal
AFTER = """cpu  10090 0 2020 80060 100 0 50 430 0 0
cpu0 5045 0 1010 40045 50 0 25 0 0 0
cpu1 5045 0 1010 40015 50 0 25 430 0 0
intr 123999 0 9 0
"""


def test_parse_proc_stat_and_the_steal_share():
    before, after = parse_proc_stat(BEFORE), parse_proc_stat(AFTER)
    assert sorted(before) == ["cpu", "cpu0", "cpu1"]
    assert before["cpu1"][7] == 400
    assert steal_between(before, after) == {
        "percent": 15.0,
        "worst_cpu": "cpu1",
        "worst_cpu_percent": 30.0,
    }
    # a kernel without the steal column, or no aggregate line: no answer, not a zero
    short = {"cpu": [1, 2, 3, 4]}
    assert steal_between(short, short) is None
    assert steal_between({}, after) is None


@pytest.mark.parametrize(
    ("text", "count"), [("0-15", 16), ("0-3,8,10-11\n", 7), ("", 0), ("0-3,x", None)]
)
def test_parse_cpulist(text, count):
    assert parse_cpulist(text) == count


def _tree(tmp_path, stat, nodes):
    (tmp_path / "proc").mkdir(parents=True)
    if stat is not None:
        (tmp_path / "proc" / "stat").write_text(stat)
    for node, cpus in nodes.items():
        folder = tmp_path / "sys" / "devices" / "system" / "node" / f"node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(cpus + "\n")
    return Probe(root=str(tmp_path))


def _second_read(tmp_path, text):
    """Test double for time.sleep: the second /proc/stat appears while 'sleeping'."""
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        (tmp_path / "proc" / "stat").write_text(text)

    return sleep, slept


def test_collect_cpu_reads_stat_twice_and_the_nodes(tmp_path):
    probe = _tree(tmp_path, BEFORE, {0: "0-15", 1: "16-31", 2: ""})
    sleep, slept = _second_read(tmp_path, AFTER)
    found, unknown = collect_cpu(probe, 1.0, sleep)
    assert slept == [1.0] and unknown == {}
    assert found["steal"] == {
        "percent": 15.0,
        "worst_cpu": "cpu1",
        "worst_cpu_percent": 30.0,
        "interval_s": 1.0,
    }
    assert found["numa_cpus"] == [
        {"node": 0, "cpus": "0-15", "count": 16},
        {"node": 1, "cpus": "16-31", "count": 16},
        {"node": 2, "cpus": "", "count": 0},
    ]


def test_collect_cpu_without_sources_says_why(tmp_path):
    probe = Probe(root=str(tmp_path))
    found, unknown = collect_cpu(probe, 1.0, lambda s: None)
    assert found["steal"]["percent"] == UNKNOWN and found["numa_cpus"] == UNKNOWN
    assert unknown == {
        "numa_cpus": "/sys/devices/system/node not readable",
        "steal.percent": "/proc/stat not readable",
    }
    # 0: one read, the share since boot; nothing sleeps
    found, unknown = collect_cpu(_tree(tmp_path / "x", BEFORE, {}), 0, lambda s: 1 / 0)
    assert "steal.percent" not in unknown
    assert found["steal"]["interval_s"] == 0
    # BEFORE since boot: 400 of 92550 ticks overall, 400 of 46475 on cpu1
    assert (found["steal"]["percent"], found["steal"]["worst_cpu"]) == (0.4, "cpu1")
    assert found["steal"]["worst_cpu_percent"] == 0.9


def _host(percent, worst, virt="kvm", nodes=None):
    return {
        "virt": {"type": virt},
        "steal": {
            "percent": percent,
            "worst_cpu": "cpu1",
            "worst_cpu_percent": worst,
            "interval_s": 1.0,
        },
        "numa_cpus": nodes if nodes is not None else [{"node": 0, "cpus": "0-15", "count": 16}],
        "unknown": {"steal.percent": "/proc/stat has no steal column"}
        if percent == UNKNOWN
        else {},
    }


def test_steal_pass_warn_and_not_checked():
    warn = steal_findings(_host(15.0, 30.0), 5)[0]
    assert warn["check"] == "preflight.steal_time" and warn["status"] == "warn"
    assert "steal time 15.0% of all CPU time, cpu1 30.0% over 1.0 s" in warn["message"]
    assert "Pin the VM's vCPUs" in warn["fix"] and "docs/slow-vm.md" in warn["fix"]
    # one CPU stolen from is enough, however idle the others keep the average
    assert steal_findings(_host(2.0, 8.0), 5)[0]["status"] == "warn"
    calm = steal_findings(_host(0.5, 4.0), 5)[0]
    assert calm["status"] == "pass" and "the bench samples it under load" in calm["message"]
    bare = steal_findings(_host(0.0, 0.0, virt="none"), 5)[0]
    assert bare["status"] == "pass" and "not a VM" in bare["message"]
    unread = steal_findings(_host(UNKNOWN, UNKNOWN), 5)[0]
    assert unread["status"] == "pass"
    assert unread["message"] == "not checked: /proc/stat has no steal column"
    assert steal_findings({"virt": {}}, 5) == []  # a fact cache from before the field


def _gpus(*nodes):
    return {
        "pci_devices": [{"bus_id": f"0000:0{i}:00.0", "numa_node": n} for i, n in enumerate(nodes)]
    }


TWO_NODES = [
    {"node": 0, "cpus": "0-15", "count": 16},
    {"node": 1, "cpus": "", "count": 0},
]


def test_numa_gpu_on_a_node_without_the_hosts_cpus_warns():
    found = numa_findings(_gpus(0, 1), _host(0.0, 0.0, nodes=TWO_NODES))[0]
    assert found["check"] == "preflight.numa" and found["status"] == "warn"
    assert (
        "GPU 0000:01:00.0 on node 1, a NUMA node with none of this host's CPUs" in found["message"]
    )
    assert "(CPUs: node0: 0-15)" in found["message"]
    assert "numa: 1" in found["fix"] and "numactl --cpunodebind" in found["fix"]


def test_numa_gpus_on_nodes_with_cpus_pass():
    nodes = [{"node": 0, "cpus": "0-15", "count": 16}, {"node": 1, "cpus": "16-31", "count": 16}]
    found = numa_findings(_gpus(0, 1), _host(0.0, 0.0, virt="none", nodes=nodes))[0]
    assert found["status"] == "pass"
    assert found["message"].startswith("GPU 0000:00:00.0 on node 0; GPU 0000:01:00.0 on node 1")


def test_numa_not_checked_and_no_gpus():
    host = {**_host(0.0, 0.0), "numa_cpus": UNKNOWN, "unknown": {"numa_cpus": "no sysfs"}}
    found = numa_findings(_gpus(0), host)[0]
    assert found["status"] == "pass" and found["message"] == "not checked: no sysfs"
    assert numa_findings({"pci_devices": []}, _host(0.0, 0.0)) == []


def test_real_kvm_guest_one_node_gpu_without_a_node():
    """The H100 guest capture: one NUMA node, the GPU reports -1: the finding says that
    placement is the node's job, and passes."""
    probe = load_fixture("h100x1-kvm-cpu")
    gpu, host = gather(probe, "nvidia-smi", [], cpu_sample_s=0)
    assert gpu["pci_devices"][0]["numa_node"] == -1
    assert host["numa_cpus"] == [{"node": 0, "cpus": "0-15", "count": 16}]
    assert host["steal"]["percent"] == UNKNOWN  # the capture has no /proc/stat
    found = numa_findings(gpu, host)[0]
    assert found["status"] == "pass"
    assert "the guest has one NUMA node and its GPUs report none (numa_node -1)" in found["message"]
    assert "placement is the node's job" in found["message"]


def test_preflight_never_stops_a_blank_host_on_these():
    """No GPU, bare metal, nothing stolen: steal passes, there is no NUMA check, and none of
    the new findings is a fail whatever the facts say."""
    blank = {"present": False, "pci_devices": []}
    found = {f["check"]: f for f in preflight_findings(blank, _host(0.0, 0.0, "none"), {})}
    assert found["preflight.steal_time"]["status"] == "pass"
    assert "preflight.numa" not in found
    worst = _host(90.0, 99.0, nodes=TWO_NODES)
    statuses = {
        f["check"]: f["status"]
        for f in preflight_findings({"present": True, "count": 1, **_gpus(1)}, worst, {})
    }
    assert statuses["preflight.steal_time"] == "warn" and statuses["preflight.numa"] == "warn"
    quiet = preflight_findings(blank, _host(9.0, 9.0), {"steal_warn_percent": 10})
    assert {f["check"]: f for f in quiet}["preflight.steal_time"]["status"] == "pass"
