# Guest-side checks of where the host's CPUs sit (issue 32): steal time and the GPUs' NUMA
# node against the NUMA nodes that have this host's CPUs. Pure: the gpuhost_gpu and
# gpuhost_host facts (docs/facts.md; read by plugins/module_utils/gpuhost_cpu_stat.py and
# gpuhost_pci_gpus.py) in, findings out. Run by preflight_findings (gpuhost_preflight.py);
# unit-tested in tests/test_guest_checks.py; explained in docs/slow-vm.md "Checks, node and guest".
#
# A check whose input could not be read passes with "not checked: <why>": nothing says the
# host is slow for that reason, and a warning there would be noise on every host that lacks
# the source. Neither check ever fails: a blank host or bare metal is never stopped by them.

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import finding

UNKNOWN = "unknown"
STEAL_FIX = (
    "Pin the VM's vCPUs to host cores that no other VM and no busy host process uses (Proxmox "
    "`affinity`, gpuhost's placement on the node) and do not overcommit the node's cores; "
    "docs/slow-vm.md."
)
NUMA_FIX = (
    "Give the host CPUs on the GPU's NUMA node: in a Proxmox VM, numa: 1 with a numaN whose "
    "hostnodes is the GPU's node and vCPUs pinned to that node's cores (gpuhost's placement "
    "on the node, docs/slow-vm.md); on bare metal run the server there (numactl "
    "--cpunodebind=<node> --membind=<node>)."
)


def _in_vm(host):
    virt = (host.get("virt") or {}).get("type", UNKNOWN)
    return virt not in ("none", UNKNOWN)


def steal_findings(host, warn_percent):
    """preflight.steal_time: warn when the most-stolen CPU lost warn_percent % or more of its
    time to the hypervisor over the sample. [] for a fact cache written before the field."""
    steal = host.get("steal")
    if not isinstance(steal, dict):
        return []
    pct, worst, worst_pct = (
        steal.get("percent"),
        steal.get("worst_cpu") or "",
        steal.get("worst_cpu_percent"),
    )
    if not isinstance(pct, (int, float)) or isinstance(pct, bool):
        why = (host.get("unknown") or {}).get("steal.percent", "steal time not read")
        return [finding("preflight.steal_time", "pass", f"not checked: {why}")]
    if not isinstance(worst_pct, (int, float)) or isinstance(worst_pct, bool):
        worst_pct = pct
    interval = steal.get("interval_s")
    over = f" over {interval} s" if interval else " since boot"
    where = f", {worst} {worst_pct:.1f}%" if worst else ""
    if worst_pct >= warn_percent:
        return [
            finding(
                "preflight.steal_time",
                "warn",
                f"steal time {pct:.1f}% of all CPU time{where}{over} (warn at {warn_percent:g}% "
                "on any CPU): the hypervisor ran something else while this VM's vCPUs wanted "
                "to run, and the server's scheduler thread waits with them",
                STEAL_FIX,
            )
        ]
    note = "" if _in_vm(host) else " (not a VM: nothing steals)"
    return [
        finding(
            "preflight.steal_time",
            "pass",
            f"steal time {pct:.1f}%{where}{over}{note}; a short sample of an idle host shows "
            "steal only while it is busy: the bench samples it under load",
        )
    ]


def numa_findings(gpu, host):
    """preflight.numa: warn when a GPU reports a NUMA node that has none of this host's
    CPUs. [] without GPUs on the PCI bus or with a fact cache written before the field."""
    nodes = host.get("numa_cpus")
    devices = [d for d in gpu.get("pci_devices") or [] if isinstance(d, dict)]
    if nodes is None or not devices:
        return []
    if not isinstance(nodes, list):
        why = (host.get("unknown") or {}).get("numa_cpus", "NUMA nodes not read")
        return [finding("preflight.numa", "pass", f"not checked: {why}")]
    with_cpus = {
        n["node"]: n.get("cpus", "")
        for n in nodes
        if isinstance(n.get("count"), int) and not isinstance(n["count"], bool) and n["count"] > 0
    }
    placed = [(d.get("bus_id", "?"), d.get("numa_node")) for d in devices]
    placed = [(bus, node if isinstance(node, int) else -1) for bus, node in placed]
    far = [(bus, node) for bus, node in placed if node >= 0 and node not in with_cpus]
    cpus_text = ", ".join(f"node{n}: {c}" for n, c in sorted(with_cpus.items())) or "none"
    if far:
        detail = "; ".join(f"GPU {bus} on node {node}" for bus, node in far)
        return [
            finding(
                "preflight.numa",
                "warn",
                f"{detail}, a NUMA node with none of this host's CPUs (CPUs: {cpus_text}): "
                "every copy to and from that GPU and every kernel launch crosses to another "
                "node's memory",
                NUMA_FIX,
            )
        ]
    if all(node < 0 for _, node in placed):
        if _in_vm(host):
            shape = "one NUMA node" if len(nodes) <= 1 else f"{len(nodes)} NUMA nodes"
            message = (
                f"the guest has {shape} and its GPUs report none (numa_node -1): it cannot "
                "place memory or threads near a GPU, so placement is the node's job (vCPUs "
                "pinned to the GPUs' NUMA node there; the proxmox_host checks and "
                "docs/slow-vm.md)"
            )
        else:
            message = f"GPUs report no NUMA node (numa_node -1); CPUs: {cpus_text}"
        return [finding("preflight.numa", "pass", message)]
    detail = "; ".join(
        f"GPU {bus} on node {node}" if node >= 0 else f"GPU {bus} reports no node"
        for bus, node in placed
    )
    return [finding("preflight.numa", "pass", f"{detail}; each such node has CPUs ({cpus_text})")]
