#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Read NVIDIA GPU, driver, topology, P2P and host facts
description:
  - Collects the C(gpuhost_gpu) and C(gpuhost_host) facts documented in docs/facts.md from
    C(nvidia-smi -q -x), C(nvidia-smi topo -m), C(nvidia-smi topo -p2p r|w), sysfs, /proc,
    C(systemd-detect-virt), C(mokutil) and C(lspci).
  - Read only; never reports a change and behaves the same in check mode.
  - A missing tool or an unreadable source gives the value C(unknown) and a reason under
    the fact's C(unknown) key; the module does not fail for it. With no NVIDIA driver
    loaded it reports no GPUs from the driver and the NVIDIA devices on the PCI bus.
options:
  nvidia_smi:
    description: Path or name of the nvidia-smi binary.
    type: str
    default: nvidia-smi
  disk_paths:
    description: Paths whose free space is reported under C(gpuhost_host.disk) (model and
      cache paths; they need not exist yet).
    type: list
    elements: path
    default: []
  timeout:
    description: Seconds any one command may run; a GPU that fell off the bus can hang
      nvidia-smi.
    type: int
    default: 30
  cpu_sample_s:
    description: Seconds between the two reads of /proc/stat that give the steal time
      (C(gpuhost_host.steal)); 0 = one read, the steal time since boot (nothing waits, as preflight
      runs in every play; the bench samples steal under load, per level).
    type: float
    default: 0.0
  kernel_log:
    description: Read the kernel log (C(dmesg)) too, for role proxmox_guest's passthrough
      checks, in this same call; returned as C(kernel_log), never kept in a fact.
    type: bool
    default: false
author:
  - gpuhost contributors
"""

EXAMPLES = r"""
- name: Read GPU and host facts
  gpuhost.gpu.gpu_facts:
    disk_paths: [/var/cache/gpuhost]
  register: _facts
"""

RETURN = r"""
gpuhost_gpu:
  description: GPUs, driver, topology and P2P (docs/facts.md).
  returned: always
  type: dict
gpuhost_host:
  description: Virtualisation, kernel, OS (os-release, family), architecture, init system and
    systemd version, Secure Boot, hugepages, NUMA (CPUs per node), steal time, disk, IOMMU, IB.
  returned: always
  type: dict
kernel_log:
  description: The kernel log's text, or null when it could not be read (dmesg_restrict
    without root, no dmesg); C(kernel_log_unread) then says why.
  returned: when kernel_log
  type: str
kernel_log_unread:
  description: Why the kernel log could not be read; empty when it was.
  returned: when kernel_log
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_cpu_stat import collect_cpu  # noqa: E402
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import (  # noqa: E402
    Probe,
    collect_host,
    read_kernel_log,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi import (  # noqa: E402
    UNKNOWN,
    collect_gpu,
    empty_gpu_fact,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_pci_gpus import collect_pci_gpus  # noqa: E402


def gather(probe, nvidia_smi, disk_paths, warn=lambda msg: None, cpu_sample_s=0.0):
    """Both facts; a bug in one collector degrades that fact to 'unknown', never the play."""
    try:
        pci_devices, pci_unknown = collect_pci_gpus(probe)
    except Exception as exc:
        pci_devices, pci_unknown = [], {"pci_devices": f"internal error: {exc!r}"}
        warn(f"gpu_facts: reading PCI devices failed: {exc!r}")
    try:
        gpu = collect_gpu(probe, nvidia_smi=nvidia_smi, pci_devices=pci_devices)
    except Exception as exc:
        gpu = empty_gpu_fact()
        gpu["pci_devices"] = pci_devices
        gpu["count"] = len(pci_devices)
        gpu["present"] = bool(pci_devices)
        gpu["unknown"]["gpus"] = f"internal error: {exc!r}"
        warn(f"gpu_facts: reading GPUs failed: {exc!r}")
    gpu["unknown"].update(pci_unknown)
    try:
        host = collect_host(probe, disk_paths=disk_paths)
    except Exception as exc:
        host = {"virt": {}, "unknown": {"host": f"internal error: {exc!r}"}}
        warn(f"gpu_facts: reading host facts failed: {exc!r}")
    try:
        cpu, cpu_unknown = collect_cpu(probe, cpu_sample_s)
    except Exception as exc:
        cpu = {"numa_cpus": UNKNOWN, "steal": {"percent": UNKNOWN}}
        cpu_unknown = {"steal.percent": f"internal error: {exc!r}"}
        warn(f"gpu_facts: reading CPU time and NUMA failed: {exc!r}")
    host.update(cpu)
    host.setdefault("unknown", {}).update(cpu_unknown)
    modes = [g["virtualization_mode"] for g in gpu["gpus"] if g["virtualization_mode"] != UNKNOWN]
    if modes:
        host["virt"]["gpu_passthrough"] = any(m == "Pass-Through" for m in modes)
    else:
        host["virt"]["gpu_passthrough"] = UNKNOWN
        host["unknown"]["virt.gpu_passthrough"] = "no GPU reported a virtualization mode"
    return gpu, host


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "disk_paths": {"type": "list", "elements": "path", "default": []},
            "timeout": {"type": "int", "default": 30},
            "cpu_sample_s": {"type": "float", "default": 0.0},
            "kernel_log": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout: got {module.params['timeout']}; allowed: an int >= 1")
    sample = module.params["cpu_sample_s"]
    if not 0 <= sample <= 10:
        module.fail_json(msg=f"cpu_sample_s: got {sample}; allowed: seconds from 0 to 10")
    probe = Probe(timeout=module.params["timeout"])
    gpu, host = gather(
        probe,
        module.params["nvidia_smi"],
        module.params["disk_paths"],
        warn=module.warn,
        cpu_sample_s=sample,
    )
    extra = {}
    if module.params["kernel_log"]:
        extra["kernel_log"], extra["kernel_log_unread"] = read_kernel_log(probe)
    module.exit_json(changed=False, gpuhost_gpu=gpu, gpuhost_host=host, **extra)


if __name__ == "__main__":
    main()
