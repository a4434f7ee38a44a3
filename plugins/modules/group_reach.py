#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Whether this node of a serving group reaches the others on the network they share."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.group_reach
short_description: TCP reachability from a node of a serving group to the others
description:
  - >-
    One TCP connect per target, read as a network answer (module_utils gpuhost_reach):
    connected, or refused (the host answered and nothing listens there yet, as on rank 0's
    dist-init port before the first start), is an open path; a timeout or an unreachable
    network is not. Read-only; sends nothing but the connect.
options:
  targets:
    description: "[{host, address, port, what}]: the inventory name, the address and port, and
      what listens there (shown in the result)."
    type: list
    elements: dict
    required: true
  timeout: {description: Seconds per connect., type: float, default: 3}
  interfaces:
    description: >-
      Also list the host's network interfaces (names, addresses, speed), for role nccl's
      check that NCCL_SOCKET_IFNAME selects one that carries the group address.
    type: bool
    default: false
author: gpuhost
"""

RETURN = r"""
results:
  description: "[{host, address, port, what, outcome, detail, open}], one per target."
  type: list
  returned: always
interfaces:
  description: "{name: {addresses, speed_mbps}} (module_utils gpuhost_nccl_torch.interfaces)."
  type: dict
  returned: when interfaces is true
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nccl_torch import (  # noqa: E402
    interfaces,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_reach import (  # noqa: E402
    OPEN,
    reach,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            targets=dict(type="list", elements="dict", required=True),
            timeout=dict(type="float", default=3.0),
            interfaces=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    results = []
    for target in module.params["targets"]:
        address, port = str(target.get("address", "")), target.get("port")
        if not address or not isinstance(port, int) or not 1 <= port <= 65535:
            module.fail_json(
                msg=f"group_reach: a target needs an address and a port 1..65535: {target}"
            )
        outcome, detail = reach(address, port, module.params["timeout"])
        results.append({**target, "outcome": outcome, "detail": detail, "open": outcome in OPEN})
    extra = {}
    if module.params["interfaces"]:
        extra["interfaces"] = interfaces(
            module.get_bin_path("ip"), lambda argv: module.run_command(argv)
        )
    module.exit_json(changed=False, results=results, **extra)


if __name__ == "__main__":
    main()
