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
