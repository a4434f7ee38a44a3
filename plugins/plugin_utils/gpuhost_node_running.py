# Copyright: gpuhost contributors
# Apache-2.0
"""The node checks of role proxmox_host read for a VM that runs on the node now
(`proxmox_host_purpose: check`, what `gpuhost check` and the preflight stage ask), rather than
for one a rebuild is about to create (`rebuild`). Pure: the findings of
gpuhost_proxmox_host.host_findings and the parsed node report in, the findings as they read
for a running VM out. Unit-tested in tests/test_node_running.py; explained in docs/slow-vm.md
"Checks, node and guest".

A running VM changes what two kinds of finding mean:

- what it holds: its hugepages. Proxmox takes them from the pool when the VM starts (QEMU
  does not start without them), so the free count is what is left for other VMs, not what
  this one can get; counted against its memory it would fail on every healthy VM with
  hugepages. For a running VM the count is reported, not judged.
- what a rebuild stops on: IOMMU off, no mapping, a GPU not bound to vfio-pci, a shared IOMMU
  group. The VM running with its GPUs shows that the passthrough works today, so such a
  finding means that the spec (proxmox_vm_node, proxmox_vm_gpus) is not what runs, or that
  the next rebuild would stop there, not that the guest cannot be provisioned: a `warn` that
  says so. The guest's own checks (GPU count and model, P2P) judge the GPUs it has, and stop
  the run when they are wrong. So nothing the node says for a running VM is a `fail`.

The other findings (iommu=pt, pcie_acs_override, reset method, BAR1, link width, and the node
tuning block's governor, C-states, ACS) mean the same for a running VM and stay as they are.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed

PREFIX = "proxmox_host."
PURPOSES = ("rebuild", "check")
# Why a rebuild's `fail` is a `warn` for a running VM, per check.
RUNNING = {
    "iommu": "a VM with passed-through GPUs cannot run on a node without an IOMMU, so "
    "proxmox_vm_node_ssh_host may not be the node this VM runs on",
    "mappings": "without its mapping a GPU's own checks (vfio-pci, IOMMU group, reset, link) "
    "do not run; the VM runs with its GPUs whatever the mappings say (held by raw PCI address, "
    "or on another node than proxmox_vm_node)",
    "vfio": "Proxmox binds a VM's GPUs to vfio-pci when it starts, so the running VM does not "
    "hold these: it runs with other GPUs than proxmox_vm_gpus, or on another node",
    "iommu_groups": "the VM started, so the group is viable (its other devices are bound to "
    "vfio-pci too, or are bridges) and they belong to this VM while it runs",
}
_NOT_A_STOP = (
    "; not a stop for a running VM (the guest's own checks judge the GPUs it has): "
    "gpuhost rebuild would stop here"
)

finding = prefixed(PREFIX)


def purpose_of(spec):
    """spec's purpose ('rebuild' when absent); a value other than PURPOSES is refused."""
    purpose = str(spec.get("purpose") or "rebuild")
    if purpose not in PURPOSES:
        raise ValueError(
            f"proxmox_host_purpose: got {purpose!r}, expected one of {', '.join(PURPOSES)}"
        )
    return purpose


def for_running_vm(findings, hugepages_free, spec):
    """The rebuild's findings as they read for a VM that runs on the node now.
    hugepages_free: {numa node: {page kB: free count}} from the node report."""
    out = []
    for item in findings:
        check = item["check"].removeprefix(PREFIX)
        if check == "hugepages":
            out.append(held_hugepages(hugepages_free, spec))
        elif item["status"] == "fail":
            why = f": {RUNNING[check]}" if check in RUNNING else ""
            out.append(finding(check, "warn", item["message"] + why + _NOT_A_STOP, item["fix"]))
        else:
            out.append(item)
    return out


def pool(hugepages_free, size):
    """(page kB, {numa node: free pages}, "node0: N, ...") of the VM's hugepage size ("2",
    "1024", "any": Proxmox's `hugepages`; any is counted in 2 MiB pages) on the node."""
    kb = 2048 if size in ("2", "any") else 1048576
    free = {node: sizes.get(kb, 0) for node, sizes in (hugepages_free or {}).items()}
    return kb, free, ", ".join(f"node{n}: {f}" for n, f in sorted(free.items()))


def held_hugepages(hugepages_free, spec):
    """The running VM's hugepages: reported, not judged (it holds its own already)."""
    size = str(spec.get("hugepages") or "")
    if not size:
        return finding("hugepages", "pass", "the VM uses no hugepages")
    kb, _, listed = pool(hugepages_free, size)
    listed = listed or "none read"
    return finding(
        "hugepages",
        "pass",
        f"not judged for a running VM: it holds its own {kb // 1024} MiB hugepages "
        f"(proxmox_vm_hugepages={size}; Proxmox takes them when the VM starts), so the "
        f"free ones ({listed}) are what is left for other VMs",
    )


def unread_finding(ssh_host, address, why):
    """The node could not be read (unreachable, no root, no Python): a `warn`, so the guest's
    findings stand and the run goes on; the reason in one line, at most 300 characters."""
    reason = " ".join(str(why or "no reason given").split())[:300]
    return finding(
        "node",
        "warn",
        f"the Proxmox node was not read: proxmox_vm_node_ssh_host={ssh_host} ({address}): "
        f"{reason}; the guest's checks ran, the node's (passthrough, governor, C-states, ACS) "
        "did not",
        f"Make the node reachable as root over SSH from the controller (ansible {ssh_host} -i "
        "<inventory> -b -m ansible.builtin.ping), or set proxmox_vm_host_checks: false for "
        "this VM to leave the node out of gpuhost check.",
    )
