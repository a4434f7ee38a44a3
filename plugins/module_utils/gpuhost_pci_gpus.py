# The PCI view of NVIDIA GPUs (`gpuhost_gpu.pci_devices`, schema in docs/facts.md): what a
# host shows with no NVIDIA driver loaded, so preflight counts GPUs on a fresh VM too.
#
# Sources (docs/reference.md §5):
#   /sys/bus/pci/devices/*/{vendor,device,class,numa_node,*_link_*}, lspci -D -nn -d 10de:
# Everything touches the machine only through a probe (gpuhost_hostfacts.Probe), so tests
# substitute recorded files.

from __future__ import annotations

import re

UNKNOWN = "unknown"
NVIDIA_VENDOR = "0x10de"
# PCI base class 03 = display controller (VGA 0300, 3D 0302); the GPU's audio function
# (0403) is not a GPU.
_DISPLAY_CLASS = re.compile(r"0x03[0-9a-f]{4}")
# sysfs link speed (PCIe spec transfer rates) -> generation.
_GT_TO_GEN = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}


def link_gen(speed):
    """sysfs '32.0 GT/s PCIe' -> 5; unknown text -> None."""
    match = re.match(r"\s*([\d.]+)\s*GT/s", speed or "")
    return _GT_TO_GEN.get(match.group(1)) if match else None


def parse_lspci(text):
    """`lspci -D -nn -d 10de:` -> {bus_id: description}.

    Line shape: '0000:00:06.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM
    141GB] [10de:2335] (rev a1)'. The description keeps the vendor and model, drops the
    class, the ids and the revision.
    """
    names = {}
    for line in (text or "").splitlines():
        match = re.match(r"(\S+)\s+[^:]*\[(\w{4})\]:\s+(.*?)\s+\[[0-9a-f]{4}:[0-9a-f]{4}\]", line)
        if match:
            bus_id = match.group(1)
            if bus_id.count(":") == 1:
                bus_id = "0000:" + bus_id
            names[bus_id.lower()] = match.group(3)
    return names


def collect_pci_gpus(probe):
    """NVIDIA display-class functions from sysfs, named by lspci when it is there.

    Works with no NVIDIA driver: this is how preflight counts GPUs on a fresh VM.
    Returns (devices, unknown).
    """
    unknown = {}
    devices = []
    names = probe.listdir("/sys/bus/pci/devices")
    if names is None:
        unknown["pci_devices"] = "/sys/bus/pci/devices not readable"
        return devices, unknown
    for bus_id in names:
        base = f"/sys/bus/pci/devices/{bus_id}"
        vendor = (probe.read(f"{base}/vendor") or "").strip()
        klass = (probe.read(f"{base}/class") or "").strip()
        if vendor != NVIDIA_VENDOR or not _DISPLAY_CLASS.fullmatch(klass):
            continue
        device = (probe.read(f"{base}/device") or "").strip().replace("0x", "")
        numa = (probe.read(f"{base}/numa_node") or "").strip()
        width_cur = (probe.read(f"{base}/current_link_width") or "").strip()
        width_max = (probe.read(f"{base}/max_link_width") or "").strip()
        devices.append(
            {
                "bus_id": bus_id,
                "device_id": f"10de:{device}" if device else UNKNOWN,
                "name": UNKNOWN,
                "kernel_driver": probe.readlink_name(f"{base}/driver") or "none",
                "numa_node": int(numa) if re.fullmatch(r"-?\d+", numa) else -1,
                "iommu_group": probe.readlink_name(f"{base}/iommu_group") or "",
                "link": {
                    "gen_current": link_gen(probe.read(f"{base}/current_link_speed")) or UNKNOWN,
                    "gen_max": link_gen(probe.read(f"{base}/max_link_speed")) or UNKNOWN,
                    "width_current": int(width_cur) if width_cur.isdigit() else UNKNOWN,
                    "width_max": int(width_max) if width_max.isdigit() else UNKNOWN,
                },
            }
        )
    if devices:
        rc, out, err = probe.run(["lspci", "-D", "-nn", "-d", "10de:"])
        lspci = parse_lspci(out) if rc == 0 else {}
        for i, dev in enumerate(devices):
            dev["name"] = lspci.get(dev["bus_id"].lower(), UNKNOWN)
            if dev["name"] == UNKNOWN:
                unknown[f"pci_devices.{i}.name"] = (
                    err.strip() if rc is None else "device not listed by lspci"
                )
    return devices, unknown
