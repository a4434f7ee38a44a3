# Copyright: gpuhost contributors
# Apache-2.0
"""Filters exposing the NVIDIA driver decisions (plugins/module_utils/gpuhost_nvidia_driver.py).

probe | gpuhost.gpu.nvidia_driver_plan(gpuhost_gpu, branch, version, packages, force) -> plan dict
probe | gpuhost.gpu.nvidia_driver_reboot_needed(installed_package_version)            -> bool
version | gpuhost.gpu.nvidia_driver_upstream                                         -> "580.95.05"
probe | gpuhost.gpu.nvidia_driver_activation(needed, policy, serving, container, local, load_failed)
                                                                          -> {action, reason}
policy_stdout | gpuhost.gpu.apt_source_cached(url)  -> bool: `apt-cache policy` lists url
branch | gpuhost.gpu.driver_branch_finding(today, gpuhost_gpu, lane) -> finding (one)
"""

from __future__ import annotations

import re

from ansible_collections.gpuhost.gpu.plugins.module_utils import (
    gpuhost_driver_activation as _activation,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_nvidia_driver as _driver
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import (
    gpuhost_driver_branches as _branches,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_plain import plain


def nvidia_driver_plan(probe, gpu_facts, branch, version, packages, force=False):
    gpu = plain(gpu_facts) if isinstance(gpu_facts, dict) else {}
    names = [str(p) for p in plain(packages)]
    return _driver.plan(plain(probe), gpu, int(branch), str(version or ""), names, bool(force))


def nvidia_driver_reboot_needed(probe, installed_version):
    return _driver.reboot_needed(plain(probe), str(installed_version or ""))


def nvidia_driver_upstream(version):
    return _driver.upstream_version(str(version or ""))


def nvidia_driver_activation(probe, needed, policy, serving, container, local, load_failed=""):
    probe = plain(probe)
    return _activation.decide(
        needed=bool(needed),
        policy=str(policy),
        serving=[str(u) for u in plain(serving or [])],
        container=bool(container),
        local=bool(local),
        holders=probe.get("holders") or {},
        module_available=probe.get("installed_module_flavour", "unknown") != "unknown",
        load_failed=str(load_failed or ""),
    )


def _location(url: str) -> str:
    """A source's location without scheme and edge slashes: `apt-cache policy` prints
    file:///srv/x/ as file:/srv/x and https://h/p/ as https://h/p."""
    return re.sub(r"^[a-z][a-z0-9+.-]*:/*", "", str(url).strip()).strip("/")


def apt_source_cached(policy_stdout, url):
    """Whether apt's cache holds the source at url (a `apt-cache policy` line names it).
    False when it was configured but never read: an interrupted run between writing the
    source and `apt-get update`."""
    wanted = _location(url)
    for line in str(policy_stdout or "").splitlines():
        fields = line.split()
        # " 500 https://host/path  Packages" or " 500 http://host/debian suite/comp arch Packages"
        if len(fields) >= 2 and fields[0].isdigit() and _location(fields[1]) == wanted:
            return True
    return False


def driver_branch_finding(branch, today, gpu_facts=None, lane=""):
    gpu = plain(gpu_facts) if isinstance(gpu_facts, dict) else {}
    archs = [str(g.get("architecture", "")) for g in gpu.get("gpus") or []]
    return _branches.driver_branch_finding(branch, str(today), archs, str(lane or ""))


class FilterModule:
    def filters(self):
        return {
            "nvidia_driver_plan": nvidia_driver_plan,
            "nvidia_driver_reboot_needed": nvidia_driver_reboot_needed,
            "nvidia_driver_upstream": nvidia_driver_upstream,
            "nvidia_driver_activation": nvidia_driver_activation,
            "apt_source_cached": apt_source_cached,
            "driver_branch_finding": driver_branch_finding,
        }
