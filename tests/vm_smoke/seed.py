"""The NoCloud seed of `make vm-smoke`, as Proxmox renders it for a VM role proxmox_vm made.

Role proxmox_vm does not write cloud-init itself: it sets the VM's cloud-init options
(ciuser, sshkeys, ipconfig0; roles/proxmox_vm/tasks/main.yml) and Proxmox renders the NoCloud
files from them (qemu-server's PVE/QemuServer/Cloudinit.pm, "nocloud" format:
https://github.com/proxmox/qemu-server/blob/master/src/PVE/QemuServer/Cloudinit.pm). This
renders the same three files from the role's defaults (roles/proxmox_vm/defaults/main.yml),
so a default change there changes the seed here. One deviation, named in the output:
package_upgrade is false (Proxmox's ciupgrade default is on; an upgrade under software
emulation would add many minutes and is not what is tested).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = ROOT / "roles" / "proxmox_vm" / "defaults" / "main.yml"


def role_defaults() -> dict:
    return yaml.safe_load(DEFAULTS.read_text())


def network_config(ipconfig0: str, mac: str) -> str:
    """ipconfig0 (Proxmox's `ip=dhcp` or `ip=CIDR,gw=GW`) -> NoCloud network-config v1."""
    opts = dict(part.split("=", 1) for part in ipconfig0.split(",") if "=" in part)
    lines = [
        "version: 1",
        "config:",
        "    - type: physical",
        "      name: eth0",
        f"      mac_address: '{mac}'",
        "      subnets:",
    ]
    if opts.get("ip", "dhcp") == "dhcp":
        lines.append("      - type: dhcp4")
    else:
        lines += ["      - type: static", f"        address: '{opts['ip']}'"]
        if "gw" in opts:
            lines.append(f"        gateway: '{opts['gw']}'")
    return "\n".join(lines) + "\n"


def user_data(name: str, user: str, ssh_keys: list[str]) -> str:
    lines = [
        "#cloud-config",
        f"hostname: {name}",
        "manage_etc_hosts: true",
        f"fqdn: {name}",
        f"user: {user}",
    ]
    if ssh_keys:
        lines.append("ssh_authorized_keys:")
        lines += [f"  - {key}" for key in ssh_keys]
    lines += [
        "chpasswd:",
        "  expire: False",
        "users:",
        "  - default",
        "# vm-smoke: Proxmox's ciupgrade default would render true (see tests/vm_smoke/seed.py)",
        "package_upgrade: false",
    ]
    return "\n".join(lines) + "\n"


def render(
    name: str, ssh_keys: list[str], mac: str, defaults: dict | None = None
) -> dict[str, str]:
    """{user-data, meta-data, network-config} for one VM, from role proxmox_vm's settings."""
    d = defaults if defaults is not None else role_defaults()
    keys = list(d.get("proxmox_vm_ssh_keys") or []) + list(ssh_keys)
    user = user_data(name, d["proxmox_vm_ci_user"], keys)
    network = network_config(d["proxmox_vm_ipconfig0"], mac)
    # Proxmox's instance-id is a digest of the rendered files: a changed seed is a new instance.
    instance = hashlib.sha1((user + network).encode()).hexdigest()
    return {
        "user-data": user,
        "meta-data": f"instance-id: {instance}\n",
        "network-config": network,
    }
