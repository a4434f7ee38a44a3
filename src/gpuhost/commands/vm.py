"""`gpuhost vm create|destroy`: create or destroy GPU VMs on Proxmox (group proxmox_vms).

The logic is gpuhost.commands.rebuild's (vm_add_arguments, vm_run); this module is the command's
entry in gpuhost.commands.REGISTRY.
"""

from __future__ import annotations

from gpuhost.commands.rebuild import vm_add_arguments as add_arguments
from gpuhost.commands.rebuild import vm_run as run

NAME = "vm"
HELP = "create or destroy GPU VMs on Proxmox (group proxmox_vms), keeping the model disk"

__all__ = ["HELP", "NAME", "add_arguments", "run"]
