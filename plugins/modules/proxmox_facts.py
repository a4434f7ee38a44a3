#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Read what the proxmox_vm role checks a VM spec against, from the Proxmox API."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: proxmox_facts
short_description: Cluster VMs, one node and the PCI resource mappings from the Proxmox API
description:
  - Reads C(/cluster/resources?type=vm), the C(/nodes) entry of I(node) and
    C(/cluster/mapping/pci) through proxmoxer, for the proxmox_vm role's checks before any
    change (unknown mappings, memory larger than the node, a vmid in use). Read-only; runs on
    the controller.
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
author: gpuhost
requirements: [proxmoxer >= 2.0]
"""

RETURN = r"""
vms: {description: cluster/resources entries of type qemu., type: list, returned: always}
node: {description: The /nodes entry of I(node), or null., type: dict, returned: always}
mappings: {description: PCI resource mappings visible to the user., type: list, returned: always}
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
    try:
        api = ProxmoxAPI(p["api_host"], verify_ssl=p["validate_certs"], **auth)
        vms = [v for v in api.cluster.resources.get(type="vm") if v.get("type") == "qemu"]
        node = next((n for n in api.nodes.get() if n.get("node") == p["node"]), None)
        mappings = api.cluster.mapping.pci.get()
    except Exception as exc:
        module.fail_json(msg=f"Proxmox API at {p['api_host']}:{p['api_port']}: {exc}")
    module.exit_json(changed=False, vms=vms, node=node, mappings=mappings)


if __name__ == "__main__":
    main()
