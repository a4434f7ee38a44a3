#!/usr/bin/python
"""Ansible module: read the NVIDIA driver state of a host without changing it."""

from __future__ import annotations

import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_cuda_toolkits import (
    ToolkitError,
    toolkits,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_driver_activation import (
    gpu_holders,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvidia_driver import (
    flavour_from_license,
    is_driver_family,
    is_gpu,
    loaded_driver,
    nvswitch_present,
    parse_dpkg_query,
    pci_functions,
    plan,
    secure_boot_state,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secure_boot import (
    SECURE_BOOT_EFIVAR,
)

DOCUMENTATION = r"""
---
module: nvidia_driver_probe
short_description: Read the NVIDIA driver state of a host (loaded module, packages, Secure Boot)
description:
  - Reads procfs, sysfs, efivarfs and the dpkg database; changes nothing and needs no network,
    so it runs the same in check mode and on hosts whose package repository is unreachable.
  - Used by the C(nvidia_driver) role when the preflight facts (C(gpuhost_gpu)) are absent and
    for what they do not cover (NVSwitch, driver packages, holds, Secure Boot test seam).
options:
  root:
    description: Directory treated as C(/) when reading files (tests point it at a fixture tree).
    type: path
    default: /
  secure_boot_efivar:
    description:
      - The efivarfs file holding the SecureBoot variable (the EFI global variable GUID). Tests
        point it at a fake file (a test double); on real hosts keep the default. Read by
        plugins/module_utils/gpuhost_secure_boot.py, the one reader for every role.
    type: path
    default: /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c
  plan_for:
    description:
      - Also decide what role nvidia_driver does from this reading (C(plan) in the result, the
        rule of C(plugins/module_utils/gpuhost_nvidia_driver.py)), so the decision is kept
        with the reading it was made from. Keys C(branch), C(version), C(packages), C(force)
        and C(gpu_facts) (preflight's C(gpuhost_gpu), or empty). Unset = no plan.
    type: dict
  cuda_toolkits_in:
    description:
      - Also list the CUDA toolkits in this directory (C(cuda-*) directories with a
        C(bin/nvcc)) and the release each compiler reports (role cuda_toolkit; one call for
        its GPU presence and toolkits). Unset = no look. A compiler that fails its
        C(--version) fails the task.
    type: path
author: gpuhost
"""

EXAMPLES = r"""
- name: Read the driver state
  gpuhost.gpu.nvidia_driver_probe:
  register: _probe
"""

RETURN = r"""
driver:
  description: The loaded kernel module (loaded, version, branch, flavour open|proprietary|unknown).
  returned: always
  type: dict
installed_module_flavour:
  description: C(modinfo -F license nvidia) for the running kernel, as open|proprietary|unknown.
  returned: always
  type: str
gpus:
  description: NVIDIA display-class PCI functions (bus_id, class, device).
  returned: always
  type: list
gpu_present:
  description: Any NVIDIA display-class PCI function exists.
  returned: always
  type: bool
nvswitch_present:
  description: An NVIDIA NVSwitch (PCI class 0x0680) is visible.
  returned: always
  type: bool
secure_boot:
  description: Secure Boot state (enabled|disabled|unknown) and where it was read.
  returned: always
  type: dict
packages:
  description: Installed driver-family packages (name, version, held, state).
  returned: always
  type: list
holders:
  description:
    - What holds the GPUs now, read from sysfs - the driver each GPU is bound to, nouveau loaded, an
      nvidia module loaded (version, refcnt, modules using it). Decides modprobe vs reboot.
  returned: always
  type: dict
dpkg:
  description: Whether the dpkg database could be read.
  returned: always
  type: bool
plan:
  description: With I(plan_for), the decision (action skip|keep|foreign|install, reason, ...).
  returned: when plan_for is set
  type: dict
cuda_toolkits:
  description: With I(cuda_toolkits_in), each toolkit (path, version X.Y or unknown), by path.
  returned: always
  type: list
"""


def _run(module, args):
    """Run a read-only tool; None when it is missing or fails (the probe never fails on it)."""
    if not shutil.which(args[0]):
        return None
    rc, out, _err = module.run_command(args, check_rc=False)
    return out if rc == 0 else None


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "secure_boot_efivar": {
                "type": "path",
                "default": SECURE_BOOT_EFIVAR,
            },
            "cuda_toolkits_in": {"type": "path"},
            "plan_for": {
                "type": "dict",
                "options": {
                    "branch": {"type": "int", "required": True},
                    "version": {"type": "str", "default": ""},
                    "packages": {"type": "list", "elements": "str", "required": True},
                    "force": {"type": "bool", "default": False},
                    "gpu_facts": {"type": "dict", "default": {}},
                },
            },
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    live = root == "/"

    functions = pci_functions(root)
    license_text = _run(module, ["modinfo", "-F", "license", "nvidia"]) if live else None
    dpkg_out = (
        _run(module, ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${Status}\n"])
        if live
        else None
    )
    cuda_in = module.params["cuda_toolkits_in"]
    try:
        cuda = (
            toolkits(cuda_in, lambda argv: module.run_command(argv, check_rc=False))
            if cuda_in
            else []
        )
    except ToolkitError as err:
        module.fail_json(msg=f"cuda_toolkit: {err}")
    packages = [
        p for p in parse_dpkg_query(dpkg_out or "") if is_driver_family(p["name"], p["version"])
    ]

    result = {
        "driver": loaded_driver(root),
        "installed_module_flavour": flavour_from_license(license_text),
        "gpus": [f for f in functions if is_gpu(f)],
        "holders": gpu_holders(root, [f["bus_id"] for f in functions if is_gpu(f)]),
        "gpu_present": any(is_gpu(f) for f in functions),
        "nvswitch_present": nvswitch_present(root, functions),
        "secure_boot": secure_boot_state(
            root,
            module.params["secure_boot_efivar"],
            lambda: _run(module, ["mokutil", "--sb-state"]) if live else None,
        ),
        "packages": packages,
        "dpkg": dpkg_out is not None,
        "cuda_toolkits": cuda,
    }
    wanted = module.params["plan_for"]
    if wanted:
        result["plan"] = plan(
            result,
            wanted["gpu_facts"],
            wanted["branch"],
            wanted["version"],
            wanted["packages"],
            wanted["force"],
        )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
