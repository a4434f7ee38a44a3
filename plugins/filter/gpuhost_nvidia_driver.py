# Copyright: gpuhost contributors
# Apache-2.0
"""Filters exposing the NVIDIA driver decisions (plugins/module_utils/gpuhost_nvidia_driver.py).

probe | gpuhost.gpu.nvidia_driver_plan(gpuhost_gpu, branch, version, packages, force) -> plan dict
probe | gpuhost.gpu.nvidia_driver_reboot_needed(installed_package_version)            -> bool
version | gpuhost.gpu.nvidia_driver_upstream                                         -> "580.95.05"
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_nvidia_driver as _driver
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_plain import plain


def nvidia_driver_plan(probe, gpu_facts, branch, version, packages, force=False):
    gpu = plain(gpu_facts) if isinstance(gpu_facts, dict) else {}
    names = [str(p) for p in plain(packages)]
    return _driver.plan(plain(probe), gpu, int(branch), str(version or ""), names, bool(force))


def nvidia_driver_reboot_needed(probe, installed_version):
    return _driver.reboot_needed(plain(probe), str(installed_version or ""))


def nvidia_driver_upstream(version):
    return _driver.upstream_version(str(version or ""))


class FilterModule:
    def filters(self):
        return {
            "nvidia_driver_plan": nvidia_driver_plan,
            "nvidia_driver_reboot_needed": nvidia_driver_reboot_needed,
            "nvidia_driver_upstream": nvidia_driver_upstream,
        }
