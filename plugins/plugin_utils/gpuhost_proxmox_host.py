# Copyright: gpuhost contributors
# Apache-2.0
"""GPU passthrough checks on the Proxmox node itself (role proxmox_host). Pure: the text the
role reads on the node (one sectioned report, formats in tests/fixtures/proxmox-node/
SOURCE.md) and the VM spec in, findings out ({check, status, message, fix}, docs/facts.md),
the same shape as gpuhost_proxmox (the checks from inside the guest). Unit-tested in
tests/test_proxmox_host_findings.py.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_node_running as _running

PREFIX = "proxmox_host."
_SECTION = re.compile(r"^### (\S+)(?: (\S+))?\s*$")
_LNK = re.compile(r"(LnkCap|LnkSta):.*?Speed ([\d.]+)GT/s.*?Width x(\d+)")


finding = prefixed(PREFIX)


def sections(text):
    """{(name, arg or None): [lines]} of a `### name [arg]` report: the one format of the
    node's reports (this role's and its node tuning block's, gpuhost_node_tuning)."""
    out, current = {}, None
    for line in (text or "").splitlines():
        match = _SECTION.match(line)
        if match:
            current = (match.group(1), match.group(2))
            out.setdefault(current, [])
        elif current:
            out[current].append(line)
    return out


def parse_report(text):
    """Split the node report into {cmdline, groups, hugepages, mappings, devices, cpus,
    numa_nodes, isolated} (the last three: the CPU topology, for gpuhost_proxmox_placement)."""
    parts = sections(text)
    out = {
        "cmdline": " ".join(parts.get(("cmdline", None), [])).split(),
        "groups": {},
        "hugepages": {},
        "mappings": None,
        "devices": {},
        "cpus": {},
        "numa_nodes": {},
        "isolated": [],
    }
    for line in parts.get(("iommu_groups", None), []):
        m = re.search(r"iommu_groups/(\d+)/devices/([0-9a-fA-F:.]+)", line)
        if m:
            out["groups"].setdefault(m.group(1), []).append(m.group(2).lower())
    for line in parts.get(("hugepages", None), []):
        m = re.search(r"node(\d+)/hugepages/hugepages-(\d+)kB/free_hugepages:(\d+)", line)
        if m:
            node = out["hugepages"].setdefault(int(m.group(1)), {})
            node[int(m.group(2))] = int(m.group(3))
    _cpu_topology(parts, out)
    raw = "\n".join(parts.get(("mappings", None), [])).strip()
    if raw:
        try:
            out["mappings"] = json.loads(raw)
        except ValueError:
            out["mappings"] = None
    for (name, arg), lines in parts.items():
        if name == "device" and arg:
            out["devices"][arg.lower()] = _device(lines)
    return out


def cpu_list(text):
    """'0-3,8,10-11' (the kernel's cpulist format) -> [0, 1, 2, 3, 8, 10, 11]; raises ValueError."""
    out = set()
    for part in str(text).strip().split(","):
        if not part.strip():
            continue
        low, _, high = part.strip().partition("-")
        low, high = int(low), int(high or low)
        if high < low:
            raise ValueError(f"invalid range {part!r}")
        out.update(range(low, high + 1))
    return sorted(out)


def _cpu_topology(sections, out):
    """`cpus`: grep -H of cpuN/topology/{physical_package_id,core_id,thread_siblings_list};
    `numa_nodes`: grep -H of nodeN/cpulist; `isolated`: /sys/devices/system/cpu/isolated."""
    path = re.compile(r"/cpu(\d+)/topology/(physical_package_id|core_id|thread_siblings_list):(.*)")
    for line in sections.get(("cpus", None), []):
        m = path.search(line)
        if not m:
            continue
        cpu = out["cpus"].setdefault(int(m.group(1)), {})
        try:
            if m.group(2) == "thread_siblings_list":
                cpu["siblings"] = cpu_list(m.group(3))
            else:
                cpu["package" if m.group(2) == "physical_package_id" else "core"] = int(m.group(3))
        except ValueError:
            continue
    for line in sections.get(("numa_nodes", None), []):
        m = re.search(r"/node(\d+)/cpulist:(.*)", line)
        if m:
            try:
                out["numa_nodes"][int(m.group(1))] = cpu_list(m.group(2))
            except ValueError:
                continue
    try:
        out["isolated"] = cpu_list(" ".join(sections.get(("isolated", None), [])).strip())
    except ValueError:
        out["isolated"] = []


def _device(lines):
    dev = {
        "driver": None,
        "reset_method": None,
        "bar1_bytes": None,
        "link": {},
        "numa_node": None,
        "root_port": None,
    }
    resources = []
    in_resource = False
    for line in lines:
        if line.startswith("driver:"):
            dev["driver"] = line.split(":", 1)[1].strip() or None
        elif line.startswith("reset_method:"):
            dev["reset_method"] = line.split(":", 1)[1].strip() or None
        elif line.startswith("numa_node:"):
            text = line.split(":", 1)[1].strip()
            dev["numa_node"] = int(text) if re.fullmatch(r"-?\d+", text) else None
        elif line.startswith("sysfs_path:"):
            # /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0: the first bridge under the
            # PCI root is the root port (none when the device sits on the root bus itself)
            hops = re.findall(r"/([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])", line.lower())
            dev["root_port"] = hops[0] if len(hops) > 1 else None
        elif line.startswith("resource:"):
            in_resource = True
        elif in_resource and re.match(r"0x[0-9a-f]+ 0x[0-9a-f]+ 0x[0-9a-f]+", line.strip()):
            start, end, _flags = (int(x, 16) for x in line.split())
            resources.append(end - start + 1 if end else 0)
        else:
            in_resource = False
            m = _LNK.search(line)
            if m:
                dev["link"][m.group(1)] = (float(m.group(2)), int(m.group(3)))
    # sysfs `resource`: one line per BAR; BAR1 is the second line (NVIDIA's frame buffer BAR)
    if len(resources) > 1:
        dev["bar1_bytes"] = resources[1]
    return dev


def _mapping_paths(mappings, node):
    """{mapping id: [PCI paths on node]} from `pvesh get /cluster/mapping/pci` JSON."""
    out = {}
    for mapping in mappings or []:
        paths = []
        for entry in mapping.get("map") or []:
            fields = dict(p.split("=", 1) for p in str(entry).split(",") if "=" in p)
            if fields.get("node") == node:
                paths.append(fields.get("path", "").lower())
        out[mapping.get("id")] = paths
    return out


def host_findings(report, spec):
    """spec: {node, gpus: [mapping ids], memory_mib, hugepages ('', '2', '1024', 'any'),
    vram_mib (per GPU, 0 = unknown), purpose ('rebuild': a VM about to be created, the
    default; 'check': the VM runs on the node now, gpuhost_node_running)}."""
    purpose = _running.purpose_of(spec)
    facts = parse_report(report)
    out = []
    cmdline = facts["cmdline"]
    iommu_on = bool(facts["groups"])
    if iommu_on:
        out.append(finding("iommu", "pass", f"IOMMU on ({len(facts['groups'])} groups)"))
    else:
        out.append(
            finding(
                "iommu",
                "fail",
                "no IOMMU groups under /sys/kernel/iommu_groups: the IOMMU is off",
                "Enable VT-d/AMD-Vi in the firmware; on Intel add intel_iommu=on to the kernel "
                "command line (AMD enables it by default), then reboot the node.",
            )
        )
    if "iommu=pt" in cmdline:
        out.append(finding("cmdline", "pass", "iommu=pt on the kernel command line"))
    else:
        out.append(
            finding(
                "cmdline",
                "warn",
                "iommu=pt missing from the kernel command line: host devices pay for IOMMU "
                "translation they do not need",
                "Add iommu=pt to GRUB_CMDLINE_LINUX_DEFAULT (or /etc/kernel/cmdline with "
                "systemd-boot), run proxmox-boot-tool refresh, reboot.",
            )
        )
    acs = [a for a in cmdline if a.startswith("pcie_acs_override")]
    if acs:
        out.append(
            finding(
                "acs_override",
                "warn",
                f"{acs[0]} on the kernel command line: IOMMU groups are split by fiat, so "
                "devices that can still talk to each other look isolated",
                "Remove pcie_acs_override and give each GPU a slot with its own IOMMU group "
                "(or accept the shared group knowingly).",
            )
        )
    paths = _mapping_paths(facts["mappings"], spec.get("node"))
    gpus = spec.get("gpus") or []
    missing = [g for g in gpus if not paths.get(g)]
    if facts["mappings"] is None:
        out.append(
            finding(
                "mappings",
                "fail",
                "PCI resource mappings not readable (pvesh get /cluster/mapping/pci)",
                "Run the check as root on the node.",
            )
        )
    elif missing:
        out.append(
            finding(
                "mappings",
                "fail",
                f"no PCI mapping on {spec.get('node')} for {', '.join(missing)}",
                "Create them: pvesh create /cluster/mapping/pci --id <id> --map "
                "node=<node>,path=<bdf>,id=<vendor:device> (or Datacenter > Resource Mappings).",
            )
        )
    else:
        out.append(
            finding("mappings", "pass", f"a PCI mapping on {spec.get('node')} for every GPU")
        )
    bdfs = [(g, p) for g in gpus for p in paths.get(g, [])]
    out.extend(_device_findings(facts, bdfs, spec))
    out.append(_hugepage_finding(facts, spec))
    return _running.for_running_vm(out, facts["hugepages"], spec) if purpose == "check" else out


def _group_of(facts, bdf):
    for group, members in facts["groups"].items():
        if bdf in members or any(m.startswith(bdf) for m in members):
            return group, members
    return None, []


def _device_findings(facts, bdfs, spec):
    out = []
    unbound, shared, resets, bars, links, slow = [], [], [], [], [], []
    vram = int(spec.get("vram_mib") or 0) * 1024 * 1024
    for gpu, path in bdfs:
        dev = facts["devices"].get(path) or facts["devices"].get(path + ".0") or {}
        if dev.get("driver") != "vfio-pci":
            unbound.append(f"{gpu} ({path}: {dev.get('driver') or 'no driver'})")
        slot = path.rsplit(".", 1)[0] if path.count(".") else path
        group, members = _group_of(facts, path)
        others = [m for m in members if not m.startswith(slot)]
        if group is not None and others:
            shared.append(f"{gpu} group {group} with {', '.join(others)}")
        if not dev.get("reset_method"):
            resets.append(f"{gpu} ({path}): none")
        if vram and isinstance(dev.get("bar1_bytes"), int) and dev["bar1_bytes"] < vram:
            bars.append(f"{gpu} BAR1 {dev['bar1_bytes'] // 2**20} MiB < VRAM {vram // 2**20} MiB")
        cap, sta = dev.get("link", {}).get("LnkCap"), dev.get("link", {}).get("LnkSta")
        if cap and sta and (sta[0] < cap[0] or sta[1] < cap[1]):
            # A narrower link is a fault at any time; a slower one alone may be an idle GPU
            # saving power (it trains its speed down), which only a reading under load tells.
            text = f"{gpu} {sta[0]:g}GT/s x{sta[1]} of {cap[0]:g}GT/s x{cap[1]}"
            (links if sta[1] < cap[1] else slow).append(text)
    if not bdfs:
        return []
    out.append(
        finding(
            "vfio",
            "fail" if unbound else "pass",
            f"not bound to vfio-pci: {'; '.join(unbound)}" if unbound else "GPUs bound to vfio-pci",
            "Bind them: options vfio-pci ids=<vendor:device> in /etc/modprobe.d/vfio.conf, "
            "blacklist nouveau/nvidia on the node, update-initramfs -u, reboot."
            if unbound
            else "",
        )
    )
    out.append(
        finding(
            "iommu_groups",
            "fail" if shared else "pass",
            f"GPU IOMMU group shared: {'; '.join(shared)}"
            if shared
            else "each GPU alone in its IOMMU group",
            "Move the GPU to a slot behind its own root port, or pass the whole group."
            if shared
            else "",
        )
    )
    out.append(
        finding(
            "reset_method",
            "warn" if resets else "pass",
            f"no reset method: {'; '.join(resets)}" if resets else "every GPU has a reset method",
            "Without FLR/bus reset the GPU may not come back after the VM stops: expect host "
            "reboots on rebuild; check the slot and firmware."
            if resets
            else "",
        )
    )
    if vram:
        out.append(
            finding(
                "bar1",
                "warn" if bars else "pass",
                f"small BAR1: {'; '.join(bars)}" if bars else "BAR1 covers VRAM on every GPU",
                "Enable Above 4G decoding and Resizable BAR in the node firmware." if bars else "",
            )
        )
    idle = (
        f" (speed below LnkCap: {'; '.join(slow)}: an idle GPU trains its link speed down to "
        "save power, so the node cannot judge speed; `gpuhost doctor` on the VM judges it "
        "under load)"
        if slow
        else ""
    )
    out.append(
        finding(
            "pcie_links",
            "warn" if links else "pass",
            f"narrower links: {'; '.join(links)}{idle}"
            if links
            else f"GPU links at full width{idle or ' and speed'}",
            "Compare LnkSta with LnkCap (lspci -vv); reseat the card, check risers and the slot's "
            "bifurcation; then run `gpuhost doctor` under load for the speed."
            if links
            else "",
        )
    )
    return out


def _hugepage_finding(facts, spec):
    size = str(spec.get("hugepages") or "")
    if not size:
        return finding("hugepages", "pass", "the VM uses no hugepages")
    kb, free, per_node = _running.pool(facts["hugepages"], size)
    need = int(spec.get("memory_mib") or 0) * 1024 // kb
    # A rebuild destroys the running VM first: the pages it holds come back to the pool.
    held = int(spec.get("held_mib") or 0) * 1024 // kb
    total = sum(free.values()) + held
    if held:
        per_node += f"; {held} held by the VM itself, freed when it is destroyed"
    if total >= need:
        return finding(
            "hugepages",
            "pass",
            f"{total} free {kb // 1024} MiB hugepages ({per_node}), need {need}",
        )
    return finding(
        "hugepages",
        "fail",
        f"{total} free {kb // 1024} MiB hugepages ({per_node or 'none'}), the VM needs {need}",
        f"Reserve them per NUMA node at boot: hugepagesz={kb // 1024}M hugepages=<n> on the kernel "
        "command line, or echo <n> > /sys/devices/system/node/nodeN/hugepages/"
        f"hugepages-{kb}kB/nr_hugepages before memory fragments.",
    )
