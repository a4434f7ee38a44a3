# Copyright: gpuhost contributors
# Apache-2.0
"""Where a GPU VM sits on its Proxmox node (issue 32 item 1). Pure, two steps:

- node_topology(report, node): the node report role proxmox_host reads as root (sections
  `cpus`, `numa_nodes`, `isolated`, `hugepages`, `mappings`, `device <bdf>`; formats in
  tests/fixtures/proxmox-node/SOURCE.md) -> the fact gpuhost_proxmox_node (docs/facts.md):
  per logical CPU its package, core, NUMA node and SMT siblings, the isolated CPUs, the free
  hugepages per NUMA node and size, and per mapped GPU its PCI path, NUMA node and root port.
- decide(spec, topology, api): proxmox_vm_placement auto -> the VM's `affinity`, `numa`,
  `numaN` and `hugepages`, each with its reason, or the refusals (naming the variable, its
  value and what is allowed) before any change. docs/slow-vm.md "Placement on the node"
  explains every rule; tests/test_proxmox_placement.py asserts them per node shape.
"""

from __future__ import annotations

import re

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_host as host
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_proxmox_vm as vm

SRC_AFFINITY = (
    "Proxmox VE qm.conf(5) `affinity`; qemu-server PVE/QemuServer.pm config_to_command runs "
    "QEMU under `taskset --cpu-list --all-tasks <affinity>`"
)
SRC_NUMA = (
    "Proxmox VE qm.conf(5) `numa`/`numa[n]`; qemu-server PVE/QemuServer/Memory.pm config "
    "(host-nodes and policy of each guest node's memory backend)"
)
SRC_ISOLATED = (
    "Linux Documentation/admin-guide/kernel-parameters.txt isolcpus: isolated CPUs are left "
    "out of the scheduler's load balancing"
)
SRC_HUGEPAGES = (
    "Linux Documentation/admin-guide/mm/hugetlbpage.rst (per-node free_hugepages); "
    "qemu-server PVE/QemuServer/Memory.pm hugepages_size"
)
SRC_WHY = "issue 32: club-3090 discussion #161 (NUMA alignment and vCPU pinning, 20 -> 60 tok/s)"
# Config keys the placement owns when it is auto.
KEYS = ("affinity", "numa", "hugepages")
_NUMA_KEY = re.compile(r"numa\d+")
# QEMU options in proxmox_vm_extra_args that set the guest topology Proxmox's numaN sets.
_TOPOLOGY_ARGS = re.compile(r"(?:^|\s)-(?:numa|smp)(?:\s|$)")


def _err(var, value, problem, allowed=""):
    return f"{var}={value!r}: {problem}" + (f"; allowed: {allowed}" if allowed else "")


def reason(key, value, why, source):
    """One decision: config `key` is `value` (None: not set) because `why`."""
    return {"key": key, "value": value, "reason": why, "source": source}


def cpu_string(cpus):
    """[0, 1, 2, 3, 8] -> '0-3,8' (the cpu list form Proxmox's affinity takes)."""
    parts, cpus = [], sorted(set(cpus))
    start = prev = None
    for cpu in [*cpus, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


def node_topology(report, node):
    """The node report -> gpuhost_proxmox_node (string keys: it is a fact, stored as JSON)."""
    facts = host.parse_report(report)
    node_of = {cpu: n for n, cpus in facts["numa_nodes"].items() for cpu in cpus}
    cpus = [
        {
            "cpu": cpu,
            "package": info.get("package"),
            "core": info.get("core"),
            "node": node_of.get(cpu),
            "siblings": info.get("siblings") or [cpu],
        }
        for cpu, info in sorted(facts["cpus"].items())
    ]
    gpus = {}
    for mapping, paths in sorted(host._mapping_paths(facts["mappings"], node).items()):
        for path in paths:
            dev = facts["devices"].get(path) or facts["devices"].get(path + ".0")
            if dev is not None:
                gpus.setdefault(mapping, []).append(
                    {"path": path, "numa_node": dev["numa_node"], "root_port": dev["root_port"]}
                )
    return {
        "node": node,
        "cpus": cpus,
        "numa_nodes": {str(n): c for n, c in sorted(facts["numa_nodes"].items())},
        "isolated": facts["isolated"],
        "hugepages_free": {
            str(n): {str(kb // 1024): free for kb, free in sorted(sizes.items())}
            for n, sizes in sorted(facts["hugepages"].items())
        },
        "gpus": gpus,
    }


def _gpu_nodes(v, topo, out):
    """The host NUMA nodes of the VM's GPUs, or None after adding the refusals."""
    nodes = sorted(int(n) for n in topo.get("numa_nodes") or {})
    found = set()
    for i, gpu in enumerate(v.get("proxmox_vm_gpus") or []):
        entries = (topo.get("gpus") or {}).get(gpu) or []
        if not entries:
            out["errors"].append(
                _err(
                    f"proxmox_vm_gpus[{i}]",
                    gpu,
                    f"its device was not read on node {topo.get('node')} (no PCI mapping of it "
                    "there, or proxmox_host read another spec): placement needs each GPU's NUMA "
                    "node",
                )
            )
            continue
        for entry in entries:
            numa = entry.get("numa_node")
            if isinstance(numa, int) and numa >= 0:
                found.add(numa)
            elif len(nodes) == 1:
                # -1: the firmware names no node for the device; with one node there is no choice
                found.add(nodes[0])
            else:
                out["errors"].append(
                    _err(
                        f"proxmox_vm_gpus[{i}]",
                        gpu,
                        f"the node reports no NUMA node for {entry.get('path')} (numa_node "
                        f"{numa}) on a machine with NUMA nodes {nodes}: the firmware's ACPI "
                        "tables (SRAT/_PXM) do not say where the slot is, so placement cannot "
                        "put the vCPUs next to it",
                        "proxmox_vm_placement: off, or a firmware that reports the slot's node",
                    )
                )
    if not v.get("proxmox_vm_gpus"):
        out["errors"].append(
            _err(
                "proxmox_vm_placement",
                "auto",
                "placement puts the vCPUs and memory next to the VM's GPUs, and "
                "proxmox_vm_gpus is empty",
                "off",
            )
        )
    return sorted(found) if not out["errors"] else None


def _taken(v, api, out):
    """{cpu: vmid} of the CPUs other VMs on the node are pinned to (own VM and keeper aside)."""
    own = {int(v.get("proxmox_vm_vmid") or 0), vm.keeper_vmid(v)}
    taken = {}
    for vmid, affinity in sorted((api.get("affinities") or {}).items()):
        if int(vmid) in own or not affinity:
            continue
        try:
            for cpu in host.cpu_list(affinity):
                taken.setdefault(cpu, int(vmid))
        except ValueError:
            continue
    if taken:
        by_vm = {}
        for cpu, vmid in taken.items():
            by_vm.setdefault(vmid, []).append(cpu)
        listed = "; ".join(f"VM {vm}: {cpu_string(c)}" for vm, c in sorted(by_vm.items()))
        out["reasons"].append(
            reason(
                "affinity",
                None,
                f"left out, pinned by other VMs on the node ({listed}): two VMs never share cores",
                SRC_AFFINITY,
            )
        )
    return taken


def _free_cores(topo, host_node, taken, isolated):
    """Whole physical cores of host_node: sibling lists, none taken, isolated or elsewhere."""
    on_node = set(topo["numa_nodes"].get(str(host_node)) or [])
    cores = {tuple(sorted(c["siblings"])) for c in topo.get("cpus") or [] if c["cpu"] in on_node}
    free = [
        core for core in cores if set(core) <= on_node and not set(core) & (set(taken) | isolated)
    ]
    return sorted(free)


def _cpus(v, topo, gnodes, taken, out):
    """The host CPUs of the vCPUs: per GPU node, the first whole cores that are free."""
    cores = int(v.get("proxmox_vm_cores") or 1)
    isolated = set(topo.get("isolated") or [])
    if isolated:
        out["reasons"].append(
            reason(
                "affinity",
                None,
                f"isolated CPUs {cpu_string(isolated)} left out: Proxmox pins the whole QEMU "
                "process to one CPU set, and the kernel does not balance threads across "
                "isolated CPUs, so the vCPU threads would pile onto one of them",
                SRC_ISOLATED,
            )
        )
    chosen = []
    for host_node in gnodes:
        free = _free_cores(topo, host_node, taken, isolated)
        picked, count = [], 0
        for core in free:
            if count >= cores:
                break
            picked.append(core)
            count += len(core)
        if count < cores:
            have = sum(len(c) for c in free)
            out["errors"].append(
                _err(
                    "proxmox_vm_cores",
                    cores,
                    f"host NUMA node {host_node} (where the GPUs are) has {len(free)} free whole "
                    f"cores ({have} CPUs) after other VMs' pinned cores and the isolated CPUs; "
                    f"the VM needs {cores} vCPUs per socket there",
                    f"<= {have}, or free cores on node {host_node} (unpin another VM), or "
                    "proxmox_vm_placement: off",
                )
            )
            continue
        cpus = sorted(c for core in picked for c in core)
        chosen += cpus
        out["reasons"].append(
            reason(
                "affinity",
                cpu_string(cpus),
                f"{len(picked)} whole cores (SMT siblings together) of host NUMA node "
                f"{host_node}, where the GPUs are, for {cores} vCPUs: the first free ones, so "
                "a re-run or a rebuild picks the same",
                SRC_AFFINITY,
            )
        )
    return chosen


def _running_with(v, api, size):
    """True when the VM runs now with hugepages of `size` (its current config)."""
    current = api.get("current") or {}
    vmid = int(v.get("proxmox_vm_vmid") or 0)
    running = any(
        int(vm.get("vmid", -1)) == vmid and vm.get("status") == "running"
        for vm in api.get("vms") or []
    )
    return running and bool(size) and str(current.get("hugepages")) == str(size)


def held_hugepages_mib(v, api):
    """MiB of hugepages the VM holds now, of the size its spec asks for (0 unless it runs with
    that size): a rebuild frees them before the new VM starts, so the node's hugepage check
    counts them as free. QEMU backs all of the guest's memory with them (`memory`, a number or
    PVE 8's `current=N` property string)."""
    size = str(v.get("proxmox_vm_hugepages") or "")
    if not _running_with(v, api, size):
        return 0
    match = re.fullmatch(
        r"(?:current=)?(\d+)(?:,.*)?", str((api.get("current") or {}).get("memory", ""))
    )
    return int(match.group(1)) if match else 0


def _own_pages(v, api, size):
    """{host node: MiB} of hugepages of `size` the VM itself holds now (running): they come
    back to it, so a re-run decides as the first run did."""
    current = api.get("current") or {}
    if not _running_with(v, api, size):
        return {}
    held = {}
    for key, value in current.items():
        if not _NUMA_KEY.fullmatch(key):
            continue
        fields = dict(p.split("=", 1) for p in str(value).split(",") if "=" in p)
        nodes = fields.get("hostnodes", "")
        if re.fullmatch(r"\d+", nodes) and re.fullmatch(r"\d+", fields.get("memory", "")):
            held[int(nodes)] = held.get(int(nodes), 0) + int(fields["memory"])
    return held


def _hugepages(v, topo, api, gnodes, per_node, out):
    want = str(v.get("proxmox_vm_hugepages") or "")
    sizes = [int(want)] if want in ("2", "1024") else [1024, 2]
    notes = []
    for size in sizes:
        held = _own_pages(v, api, size)
        need = per_node // size if per_node % size == 0 else None
        free = {
            n: int((topo.get("hugepages_free") or {}).get(str(n), {}).get(str(size), 0))
            + held.get(n, 0) // size
            for n in gnodes
        }
        listed = ", ".join(f"node{n}: {f}" for n, f in free.items())
        if need is not None and all(f >= need for f in free.values()):
            out["root"]["hugepages"] = str(size)
            out["reasons"].append(
                reason(
                    "hugepages",
                    str(size),
                    f"{need} free {size} MiB pages needed per GPU node, free: {listed}"
                    + (" (the VM's own pages counted)" if held else ""),
                    SRC_HUGEPAGES,
                )
            )
            return
        notes.append(
            f"{size} MiB: {listed}, need {need}"
            if need is not None
            else f"{size} MiB: {per_node} MiB per node is no multiple"
        )
    if want:
        out["errors"].append(
            _err(
                "proxmox_vm_hugepages",
                want,
                f"not enough free hugepages on the GPUs' NUMA node(s) ({'; '.join(notes)}); "
                "the VM would fail to start or take memory from another node",
                "'' (placement decides), or reserve pages per node (docs/slow-vm.md)",
            )
        )
        return
    out["root"]["hugepages"] = None
    out["reasons"].append(
        reason(
            "hugepages",
            None,
            f"none: not enough free pages on the GPUs' node(s) ({'; '.join(notes)}); reserve "
            "them at boot to have them",
            SRC_HUGEPAGES,
        )
    )


def decide(v, topo, api):
    """{mode, config (through the API token), root (qm set on the node), reasons, errors}.
    v: the proxmox_vm spec; topo: gpuhost_proxmox_node or None; api: proxmox_facts' answer
    (`affinities` {vmid: affinity} of the node's VMs, `vms`, the VM's `current` config)."""
    mode = str(v.get("proxmox_vm_placement") or "off")
    out = {"mode": mode, "config": {}, "root": {}, "reasons": [], "errors": []}
    if mode != "auto":
        out["reasons"].append(
            reason("*", None, "proxmox_vm_placement is off: affinity, numaN unmanaged", SRC_WHY)
        )
        return out
    if not topo or topo.get("node") != v.get("proxmox_vm_node"):
        out["errors"].append(
            _err(
                "proxmox_vm_placement",
                mode,
                f"needs the topology of node {v.get('proxmox_vm_node')!r}, read as root by role "
                "proxmox_host on proxmox_vm_node_ssh_host "
                f"({v.get('proxmox_vm_node_ssh_host')!r}); "
                + ("it was not read" if not topo else f"the one read is {topo.get('node')!r}"),
                "off, or run playbooks/vm.yml / rebuild.yml with proxmox_vm_node_ssh_host set",
            )
        )
        return out
    extra = str(v.get("proxmox_vm_extra_args") or "")
    if _TOPOLOGY_ARGS.search(extra):
        out["errors"].append(
            _err(
                "proxmox_vm_extra_args",
                extra,
                "sets -numa or -smp, the guest topology placement sets through numaN",
                "no -numa/-smp with proxmox_vm_placement: auto",
            )
        )
    gnodes = _gpu_nodes(v, topo, out)
    if gnodes is None:
        return out
    sockets = int(v.get("proxmox_vm_sockets") or 1)
    if sockets != len(gnodes):
        out["errors"].append(
            _err(
                "proxmox_vm_sockets",
                sockets,
                f"the GPUs sit on {len(gnodes)} host NUMA node(s) ({gnodes}); placement gives "
                "the guest one socket and NUMA node per host node the GPUs are on, so each "
                "GPU's driver threads run next to it",
                f"{len(gnodes)}",
            )
        )
    memory = int(v.get("proxmox_vm_memory_mib") or 0)
    if memory % len(gnodes):
        out["errors"].append(
            _err(
                "proxmox_vm_memory_mib",
                memory,
                f"not divisible among the {len(gnodes)} guest NUMA nodes",
                f"a multiple of {len(gnodes)}",
            )
        )
    if out["errors"]:
        return out
    taken = _taken(v, api, out)
    cpus = _cpus(v, topo, gnodes, taken, out)
    if out["errors"]:
        return out
    cores = int(v.get("proxmox_vm_cores") or 1)
    per_node = memory // len(gnodes)
    out["config"]["numa"] = "1"
    for i, host_node in enumerate(gnodes):
        first = i * cores
        vcpus = str(first) if cores == 1 else f"{first}-{first + cores - 1}"
        value = f"cpus={vcpus},hostnodes={host_node},memory={per_node},policy=bind"
        out["config"][f"numa{i}"] = value
        out["reasons"].append(
            reason(
                f"numa{i}",
                value,
                f"guest node {i} (vCPUs {vcpus}, {per_node} MiB) bound to host node "
                f"{host_node}, where GPU(s) {', '.join(_gpus_on(v, topo, host_node))} sit: "
                "memory never crosses the socket link",
                SRC_NUMA,
            )
        )
    out["root"]["affinity"] = cpu_string(cpus)
    _hugepages(v, topo, api, gnodes, per_node, out)
    return out


def _gpus_on(v, topo, host_node):
    nodes = [int(n) for n in topo.get("numa_nodes") or {}]
    out = []
    for gpu in v.get("proxmox_vm_gpus") or []:
        for entry in (topo.get("gpus") or {}).get(gpu) or []:
            numa = entry.get("numa_node")
            if numa == host_node or ((not isinstance(numa, int) or numa < 0) and len(nodes) == 1):
                out.append(gpu)
    return sorted(set(out))
