#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Health checks of a serving host for `gpuhost doctor` (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: doctor
short_description: Health checks of a GPU serving host (Xid, memory errors, clocks, drift ...)
description:
  - Reads nvidia-smi, the kernel log, the server unit's state and journal, the rendered unit
    and env files and the cache disk, and returns one finding (pass, warn or fail, with a
    fix) per check. The checks are pure functions in module_utils gpuhost_doctor.
  - Read-only; runs the same in check mode. The server's env file holds the API key, so it
    is compared on the host and only variable names are returned.
  - Without nvidia-smi the GPU checks are skipped and one finding says so.
options:
  nvidia_smi: {description: nvidia-smi to run., type: str, default: nvidia-smi}
  service: {description: Server unit name without .service., type: str, default: sglang-server}
  unit_path: {description: The rendered unit., type: path, required: true}
  env_path: {description: The rendered env file., type: path, required: true}
  nccl_env_path: {description: nccl.env written by role nccl., type: path, required: true}
  known_good_dir:
    description: Where role sglang_server keeps the last healthy unit and env.
    type: path
    required: true
  cache_dir: {description: Directory whose free space is checked., type: path, required: true}
  disk_warn_gib: {description: Warn below this many free GiB., type: int, default: 50}
  disk_fail_gib: {description: Fail below this many free GiB., type: int, default: 5}
  xid_fail_codes:
    description: Xid codes that fail; others warn; [] is the module's default list.
    type: list
    elements: int
    default: []
  journal_max_lines:
    description: Most journal lines read since the server's start.
    type: int
    default: 20000
  timeout: {description: Seconds any one command may run., type: int, default: 30}
  serving_group:
    description:
      - This host's serving group (sglang_server_serving_group), {} for a host on its own.
      - On a rank >= 1, which serves only SGLang's dummy /health, /ping and /health_generate,
        those three routes are asked (module_utils gpuhost_doctor_group), never /v1/models.
    type: dict
    default: {}
  server_host:
    description: The server's listen address (a wildcard is asked on loopback).
    type: str
    default: 127.0.0.1
  server_port: {description: "The server's port (sglang_server_port).", type: int, required: true}
author: gpuhost
"""

RETURN = r"""
findings: {description: "{check, status, message, fix} per check.", type: list, returned: always}
gpu_present: {description: Whether nvidia-smi answered., type: bool, returned: always}
captures: {description: What was read, without the env file's values., type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_doctor import (  # noqa: E402
    DEFAULT_XID_FAIL,
    collect,
    judge,
    public_captures,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_doctor_group import (  # noqa: E402
    check_group,
    read_routes,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import Probe  # noqa: E402
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_api import (  # noqa: E402
    Client,
    base_url,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "service": {"type": "str", "default": "sglang-server"},
            "unit_path": {"type": "path", "required": True},
            "env_path": {"type": "path", "required": True},
            "nccl_env_path": {"type": "path", "required": True},
            "known_good_dir": {"type": "path", "required": True},
            "cache_dir": {"type": "path", "required": True},
            "disk_warn_gib": {"type": "int", "default": 50},
            "disk_fail_gib": {"type": "int", "default": 5},
            "xid_fail_codes": {"type": "list", "elements": "int", "default": []},
            "journal_max_lines": {"type": "int", "default": 20000},
            "timeout": {"type": "int", "default": 30},
            "serving_group": {"type": "dict", "default": {}},
            "server_host": {"type": "str", "default": "127.0.0.1"},
            "server_port": {"type": "int", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    cap = collect(Probe(timeout=p["timeout"]), p)
    findings = judge(
        cap,
        {
            "service": p["service"],
            "cache_dir": p["cache_dir"],
            "disk_warn_gib": p["disk_warn_gib"],
            "disk_fail_gib": p["disk_fail_gib"],
            "xid_fail_codes": tuple(p["xid_fail_codes"] or DEFAULT_XID_FAIL),
        },
    )
    # A serving group's rank >= 1 serves only the dummy health routes: asked here, on the host.
    server = base_url(p["server_host"], p["server_port"])
    findings += check_group(
        p["serving_group"] or {},
        lambda: read_routes(Client(server, timeout=p["timeout"])),
        p["service"],
        (cap.get("unit_state") or {}).get("LoadState") == "loaded",
    )
    module.exit_json(
        changed=False,
        findings=findings,
        gpu_present=(cap["nvsmi_xml"] or (None,))[0] is not None,
        captures=public_captures(cap),
    )


if __name__ == "__main__":
    main()
