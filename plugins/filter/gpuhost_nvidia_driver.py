# Copyright: gpuhost contributors
# Apache-2.0
"""Filters exposing the NVIDIA driver decisions (plugins/module_utils/gpuhost_nvidia_driver.py).

probe | nvidia_driver_plan(gpuhost_gpu, branch, version, packages, force) -> plan dict
probe | nvidia_driver_reboot_needed(installed_package_version)            -> bool
version | nvidia_driver_upstream                                         -> "580.95.05"
"""

from __future__ import annotations

import importlib.util
import os

_UTILS = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "module_utils"))


def _load(name):
    # Controller plugins cannot import custom module_utils outside a collection: load by path.
    spec = importlib.util.spec_from_file_location(
        f"_gpuhost_{name}", os.path.join(_UTILS, f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_driver = _load("gpuhost_nvidia_driver")


def _plain(value):
    """Ansible hands filters lazy containers; the pure code wants plain ones."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def nvidia_driver_plan(probe, gpu_facts, branch, version, packages, force=False):
    gpu = _plain(gpu_facts) if isinstance(gpu_facts, dict) else {}
    names = [str(p) for p in _plain(packages)]
    return _driver.plan(_plain(probe), gpu, int(branch), str(version or ""), names, bool(force))


def nvidia_driver_reboot_needed(probe, installed_version):
    return _driver.reboot_needed(_plain(probe), str(installed_version or ""))


def nvidia_driver_upstream(version):
    return _driver.upstream_version(str(version or ""))


class FilterModule:
    def filters(self):
        return {
            "nvidia_driver_plan": nvidia_driver_plan,
            "nvidia_driver_reboot_needed": nvidia_driver_reboot_needed,
            "nvidia_driver_upstream": nvidia_driver_upstream,
        }
