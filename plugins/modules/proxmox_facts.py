#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Read what the proxmox_vm role checks a VM spec against, from the Proxmox API."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: proxmox_facts
short_description: The live state of the Proxmox cluster that a VM spec is checked against
description:
  - Reads C(/cluster/resources?type=vm), the C(/nodes) entry of I(node),
    C(/cluster/mapping/pci), C(/cluster/resources?type=storage), the config of every running
    VM on I(node) (which PCI devices are in use), of the VM I(vmid), of its keeper VM
    I(keeper_vmid) and of the template I(template), and the C(affinity) of every VM on
    I(node), running or not (placement never reuses another VM's cores), through
    proxmoxer, for the proxmox_vm role's checks before any change
    (gpuhost_proxmox_vm.api_errors, gpuhost_proxmox_placement.decide). Only GET requests;
    runs on the controller, in check mode too.
  - Warns when I(validate_certs) is off.
options:
  api_host: {description: API host., type: str, required: true}
  api_port: {description: API port., type: int, default: 8006}
  api_user: {description: API user (the token owner)., type: str, required: true}
  api_token_id: {description: API token id., type: str}
  api_token_secret: {description: API token secret., type: str, no_log: true}
  api_password: {description: Password (instead of a token)., type: str, no_log: true}
  validate_certs: {description: Check the TLS certificate., type: bool, default: true}
  timeout: {description: Request timeout in seconds., type: int, default: 30}
  node: {description: The node whose entry is returned., type: str, required: true}
  vmid: {description: The VM whose config is returned (0 = none)., type: int, default: 0}
  keeper_vmid: {description: Its model disk keeper VM (0 = none)., type: int, default: 0}
  template: {description: Name of the template whose config is returned., type: str, default: ''}
author: gpuhost
requirements: [proxmoxer >= 2.0]
"""

RETURN = r"""
vms: {description: cluster/resources entries of type qemu., type: list, returned: always}
node: {description: The /nodes entry of I(node), or null., type: dict, returned: always}
mappings: {description: PCI resource mappings visible to the user., type: list, returned: always}
storages: {description: cluster/resources entries of type storage., type: list, returned: always}
configs: {description: Configs of the running VMs on I(node) by vmid., type: dict, returned: always}
current: {description: The config of I(vmid), or null., type: dict, returned: always}
keeper: {description: The config of I(keeper_vmid), or null., type: dict, returned: always}
template: {description: The config of the template, or null., type: dict, returned: always}
affinities:
  description: The affinity of each VM on I(node) that has one, by vmid.
  type: dict
  returned: always
"""

import traceback  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402

try:
    from proxmoxer import ProxmoxAPI

    _IMPORT_ERROR = None
except ImportError:  # pragma: no cover - reported by the module
    _IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            api_host=dict(type="str", required=True),
            api_port=dict(type="int", default=8006),
            api_user=dict(type="str", required=True),
            api_token_id=dict(type="str"),
            api_token_secret=dict(type="str", no_log=True),
            api_password=dict(type="str", no_log=True),
            validate_certs=dict(type="bool", default=True),
            timeout=dict(type="int", default=30),
            node=dict(type="str", required=True),
            vmid=dict(type="int", default=0),
            keeper_vmid=dict(type="int", default=0),
            template=dict(type="str", default=""),
        ),
        required_one_of=[("api_token_id", "api_password")],
        required_together=[("api_token_id", "api_token_secret")],
        supports_check_mode=True,
    )
    if _IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("proxmoxer"), exception=_IMPORT_ERROR)
    p = module.params
    auth = {"user": p["api_user"], "port": p["api_port"], "timeout": p["timeout"]}
    if p["api_token_id"]:
        auth.update(token_name=p["api_token_id"], token_value=p["api_token_secret"])
    else:
        auth["password"] = p["api_password"]
    if not p["validate_certs"]:
        module.warn(
            f"proxmox_vm_validate_certs is false: the certificate of the Proxmox API at "
            f"{p['api_host']} is not checked, so whoever sits on the path can read the API "
            "token. Install the node's CA on the controller and set it true."
        )
    try:
        api = ProxmoxAPI(p["api_host"], verify_ssl=p["validate_certs"], **auth)
        resources = api.cluster.resources.get(type="vm")
        vms = [v for v in resources if v.get("type") == "qemu"]
        node = next((n for n in api.nodes.get() if n.get("node") == p["node"]), None)
        mappings = api.cluster.mapping.pci.get()
        storages = [
            s for s in api.cluster.resources.get(type="storage") if s.get("type") == "storage"
        ]
        by_id = {int(v["vmid"]): v for v in vms}

        def config(vmid):
            vm = by_id.get(int(vmid or 0))
            if vm is None:
                return None
            return api.nodes(vm["node"]).qemu(int(vmid)).config.get()

        configs = {
            str(v["vmid"]): config(v["vmid"])
            for v in vms
            if v.get("node") == p["node"] and v.get("status") == "running"
        }
        named = [v for v in vms if v.get("name") == p["template"]] if p["template"] else []
        template = config(named[0]["vmid"]) if len(named) == 1 else None
        current, keeper = config(p["vmid"]), config(p["keeper_vmid"])
        on_node = [v for v in vms if v.get("node") == p["node"] and not v.get("template")]
        affinities = {}
        for v in on_node:
            cfg = configs.get(str(v["vmid"])) or config(v["vmid"]) or {}
            if cfg.get("affinity"):
                affinities[str(v["vmid"])] = str(cfg["affinity"])
    except Exception as exc:
        module.fail_json(msg=f"Proxmox API at {p['api_host']}:{p['api_port']}: {exc}")
    module.exit_json(
        changed=False,
        vms=vms,
        node=node,
        mappings=mappings,
        storages=storages,
        configs=configs,
        current=current,
        keeper=keeper,
        template=template,
        affinities=affinities,
    )


if __name__ == "__main__":
    main()
