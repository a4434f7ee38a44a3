"""Which hosts of a group an inventory and a --limit pattern select, as Ansible reads them.

One place for it: `gpuhost rebuild`/`vm` pick the VMs (group proxmox_vms), `gpuhost update`/
`rollback` name the workers a rollout never reached (group gpu_hosts).
"""

from __future__ import annotations

from pathlib import Path


def hosts_in_group(inventories: list[Path], group: str, limit: str | None) -> list[str]:
    """Hosts of `group` that `limit` (an Ansible pattern, None for all) matches, in
    inventory order."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    manager = InventoryManager(loader=DataLoader(), sources=[str(p) for p in inventories])
    if limit:
        manager.subset(limit)
    return [h.name for h in manager.get_hosts(group)]


def connection_targets(inventories: list[Path], limit: str | None) -> list[str]:
    """`address:port` of every host the inventories and `limit` select, as Ansible will
    connect to it (ansible_host, else the name; ansible_port, else none given), with the
    inventories' group_vars/host_vars read: what two runs must not share (locking.py)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(p) for p in inventories])
    if limit:
        manager.subset(limit)
    variables = VariableManager(loader=loader, inventory=manager)
    targets = set()
    for host in manager.get_hosts("all"):
        found = variables.get_vars(host=host, include_hostvars=False)
        address, port = str(found.get("ansible_host") or host.name), found.get("ansible_port")
        if "{{" in address:  # a template: the name is what the inventory says for sure
            address = host.name
        port = "" if port is None or "{{" in str(port) else str(port)
        targets.add(f"{address.lower()}:{port}")
    return sorted(targets)
