"""`gpuhost rebuild`: destroy and re-create GPU VMs on Proxmox up to a verified server.

The logic is gpuhost.rebuild; this module is the command's entry in the registry.
"""

from __future__ import annotations

from gpuhost.rebuild import HELP, NAME, add_arguments, run

__all__ = ["HELP", "NAME", "add_arguments", "run"]
