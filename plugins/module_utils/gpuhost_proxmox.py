# Proxmox passthrough checks as seen from inside the guest (docs/reference.md §5;
# pve-docs qm-pci-passthrough.adoc). Pure: gpuhost_gpu + gpuhost_host facts (docs/facts.md)
# and the text of dmesg in, findings out. Unit-tested in tests/test_proxmox_findings.py; run
# by the proxmox_guest role through the gpuhost_proxmox_findings filter.

from __future__ import annotations

import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed

UNKNOWN = "unknown"
PREFIX = "proxmox_guest."

# Xid codes that mean the GPU is gone or needs a reset, not a recoverable application
# fault (NVIDIA "Xid Errors" catalogue: 48 double-bit ECC, 79 fallen off the bus, 154 GPU
# recovery action required). Others warn. The role passes its own list.
DEFAULT_XID_FAIL = (48, 79, 154)

# dmesg patterns (docs/reference.md §5). BAR lines come from the PCI core ("pci 0000:01:00.0: BAR 1:
# no space for [mem size 0x...]" / "failed to assign"); the NVRM lines from the driver.
_BAR_FAIL = re.compile(r"BAR \d+: (no space for|failed to assign)")
_NVRM_REGION = re.compile(r"NVRM: This PCI I/O region assigned to your NVIDIA device is invalid")
_NVRM_INVALID = re.compile(r"NVRM:.*\binvalid\b", re.IGNORECASE)
_RMINIT = re.compile(r"RmInitAdapter failed")
_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")

_CLIQUE_FIX = (
    "On the Proxmox host give every GPU the same clique: "
    "`args: -set device.hostpci0.x-nv-gpudirect-clique=0 -set device.hostpci1."
    "x-nv-gpudirect-clique=0 ...` (one per hostpciN, no hidden=1), restart the VM, then "
    "prove it with an NCCL run that checks the reduced values under a timeout (a granted but "
    "broken path hangs instead of slowing down, NVIDIA/nccl#2335). Untested on RTX PRO 6000; "
    "without it keep custom all-reduce off and accept the SHM path."
)


finding = prefixed(PREFIX)


def _is_vm(virt):
    vm = virt.get("type")
    if vm not in (None, UNKNOWN, "none"):
        return True
    if vm == "none":
        return False
    if virt.get("gpu_passthrough") is True or virt.get("hypervisor_flag") is True:
        return True
    return UNKNOWN


def proxmox_findings(gpu, host, dmesg, xid_fail_codes=DEFAULT_XID_FAIL):
    """All guest-side passthrough findings. dmesg is the kernel log text, or None when it
    could not be read (dmesg_restrict without root)."""
    virt = host.get("virt", {})
    out = []
    vm = _is_vm(virt)
    out.append(_virt_finding(virt, vm, host.get("unknown", {})))
    # Machine type and firmware only matter for GPUs that are passed through.
    if vm is not False and gpu.get("present"):
        out.extend(_platform_findings(virt, host.get("unknown", {})))
    out.extend(_dmesg_findings(dmesg, set(xid_fail_codes)))
    if not gpu.get("present"):
        out.append(
            finding(
                "gpus",
                "warn",
                "no NVIDIA GPU present: GPU passthrough checks skipped",
                "None on a test container; on a GPU VM add the GPUs as hostpciN devices.",
            )
        )
        return out
    if not gpu.get("driver", {}).get("loaded"):
        drivers = sorted({d.get("kernel_driver", "none") for d in gpu.get("pci_devices", [])})
        out.append(
            finding(
                "gpus",
                "warn",
                f"{gpu.get('count', 0)} NVIDIA GPU(s) on the PCI bus, driver not loaded "
                f"(bound to: {', '.join(drivers)}): BAR1 and P2P checks need the driver",
                "Install the driver (nvidia_driver role), then re-run the checks.",
            )
        )
        out.extend(_link_findings(gpu, vm))
        return out
    out.extend(_bar1_findings(gpu))
    out.extend(_link_findings(gpu, vm))
    out.append(_p2p_finding(gpu, vm))
    return out


def _virt_finding(virt, vm, unknown):
    vm_type = virt.get("type", UNKNOWN)
    passthrough = virt.get("gpu_passthrough")
    via = " with GPUs in Pass-Through mode" if passthrough is True else ""
    if vm is False:
        return finding("virt", "pass", "bare metal: VM passthrough checks do not apply")
    if vm_type not in (UNKNOWN, None, "none"):
        return finding("virt", "pass", f"{vm_type} guest{via}")
    reason = unknown.get("virt.type", "not detected")
    evidence = "cpu hypervisor flag" if virt.get("hypervisor_flag") is True else "no evidence"
    return finding(
        "virt",
        "warn",
        f"virtualisation type unknown ({reason}); a VM by {evidence}{via}",
        "Install systemd (systemd-detect-virt) or expose DMI (/sys/class/dmi/id) in the guest.",
    )


def _platform_findings(virt, unknown):
    out = []
    q35 = virt.get("q35")
    product = virt.get("product_name", UNKNOWN)
    if q35 is True:
        out.append(finding("machine_type", "pass", f"Q35 machine ({product})"))
    elif q35 is False:
        out.append(
            finding(
                "machine_type",
                "warn",
                f"machine type is not Q35 ({product}): GPUs sit behind a legacy PCI bus, "
                "without PCIe link or large-BAR support",
                "Set `machine: q35` and `hostpciN: <id>,pcie=1` in the VM config.",
            )
        )
    else:
        out.append(
            finding(
                "machine_type",
                "warn",
                f"machine type unknown ({unknown.get('virt.q35', 'DMI unreadable')})",
                "Check `qm config <vmid>` on the host for `machine: q35`.",
            )
        )
    firmware = virt.get("firmware", UNKNOWN)
    if firmware in ("ovmf", "uefi"):
        out.append(finding("firmware", "pass", f"{firmware.upper()} firmware"))
    elif firmware in ("seabios", "bios"):
        out.append(
            finding(
                "firmware",
                "warn",
                f"{firmware} firmware: large GPU BARs may not be mapped above 4 GiB",
                "Use `bios: ovmf` with an efidisk0 (pve-docs qm-pci-passthrough).",
            )
        )
    else:
        out.append(
            finding(
                "firmware",
                "warn",
                f"firmware unknown ({unknown.get('virt.firmware', 'not detected')})",
                "Check `qm config <vmid>` on the host for `bios: ovmf`.",
            )
        )
    return out


def scan_dmesg(text):
    """Matching lines by kind: bar, nvrm_region, nvrm_invalid, rminit, xid [(bus, code)]."""
    hits = {"bar": [], "nvrm_region": [], "nvrm_invalid": [], "rminit": [], "xid": []}
    for line in (text or "").splitlines():
        if _BAR_FAIL.search(line):
            hits["bar"].append(line.strip())
        if _NVRM_REGION.search(line):
            hits["nvrm_region"].append(line.strip())
        elif _NVRM_INVALID.search(line):
            hits["nvrm_invalid"].append(line.strip())
        if _RMINIT.search(line):
            hits["rminit"].append(line.strip())
        match = _XID.search(line)
        if match:
            hits["xid"].append((match.group(1), int(match.group(2))))
    return hits


def _dmesg_findings(dmesg, xid_fail):
    if dmesg is None:
        return [
            finding(
                "dmesg",
                "warn",
                "kernel log not readable: BAR, NVRM and Xid checks skipped",
                "Run with become (dmesg needs root when kernel.dmesg_restrict=1).",
            )
        ]
    hits = scan_dmesg(dmesg)
    out = []
    mmio_fix = (
        "Give the VM a larger 64-bit MMIO window: `cpu: host,phys-bits=host`, or `args: -fw_cfg "
        "name=opt/ovmf/X-PciMmio64Mb,string=<MiB>` (8 large-BAR GPUs need > 512 GiB); enable "
        "Above 4G decoding and ReBAR on the host."
    )
    if hits["bar"]:
        out.append(
            finding(
                "dmesg_bar",
                "fail",
                f"{len(hits['bar'])} BAR assignment failure(s), e.g. {hits['bar'][0]}",
                mmio_fix,
            )
        )
    else:
        out.append(finding("dmesg_bar", "pass", "no BAR assignment failures in dmesg"))
    if hits["nvrm_region"] or hits["nvrm_invalid"]:
        first = (hits["nvrm_region"] or hits["nvrm_invalid"])[0]
        out.append(
            finding(
                "dmesg_nvrm",
                "fail",
                f"NVRM reports an invalid resource: {first}",
                mmio_fix if hits["nvrm_region"] else "Read the full NVRM messages in dmesg.",
            )
        )
    else:
        out.append(finding("dmesg_nvrm", "pass", "no NVRM invalid-region messages"))
    if hits["rminit"]:
        out.append(
            finding(
                "dmesg_rminit",
                "fail",
                f"the driver could not initialise a GPU ({len(hits['rminit'])}x RmInitAdapter "
                "failed)",
                "Check BAR/MMIO findings; after a VM reboot Blackwell GPUs can need a host "
                "reboot (FLR/reset bug); read the NVRM lines before it in dmesg.",
            )
        )
    else:
        out.append(finding("dmesg_rminit", "pass", "no RmInitAdapter failures"))
    if hits["xid"]:
        codes = sorted({code for _, code in hits["xid"]})
        severe = [c for c in codes if c in xid_fail]
        out.append(
            finding(
                "dmesg_xid",
                "fail" if severe else "warn",
                f"{len(hits['xid'])} Xid event(s), codes {', '.join(map(str, codes))}"
                + (f" (severe: {', '.join(map(str, severe))})" if severe else ""),
                "Look the codes up in NVIDIA's Xid catalogue; 79/154 need a GPU reset or host "
                "reboot; GSP Xid 62/154 on Blackwell passthrough are known issues.",
            )
        )
    else:
        out.append(finding("dmesg_xid", "pass", "no Xid events"))
    return out


def _bar1_findings(gpu):
    small, unknown = [], []
    for g in gpu.get("gpus", []):
        bar1, vram = g.get("bar1_total_mib"), g.get("memory_total_mib")
        if not isinstance(bar1, int) or not isinstance(vram, int):
            unknown.append(f"GPU{g.get('index')}")
        elif bar1 < vram:
            small.append(f"GPU{g.get('index')} BAR1 {bar1} MiB < VRAM {vram} MiB")
    if small:
        return [
            finding(
                "bar1",
                "warn",
                f"small BAR1 on {len(small)} GPU(s): {'; '.join(small)}",
                "Enable Above 4G decoding and Resizable BAR in the host firmware and give the "
                "VM a 64-bit MMIO window (`cpu: host,phys-bits=host`, OVMF).",
            )
        ]
    if unknown:
        return [
            finding(
                "bar1",
                "warn",
                f"BAR1 size unknown for {', '.join(unknown)}",
                "Read `nvidia-smi -q -d MEMORY` (BAR1 Memory Usage) by hand.",
            )
        ]
    return [finding("bar1", "pass", "BAR1 covers VRAM on every GPU")]


def _link_findings(gpu, vm):
    if gpu.get("gpus"):
        links = [(f"GPU{g['index']}", g.get("pcie", {})) for g in gpu["gpus"]]
    else:
        links = [(d.get("bus_id"), d.get("link", {})) for d in gpu.get("pci_devices", [])]
    bad = []
    for label, link in links:
        cur, top = link.get("width_current"), link.get("width_max")
        reason = link.get("degraded_reason") or (
            f"width x{cur} of x{top}"
            if isinstance(cur, int) and isinstance(top, int) and cur < top
            else ""
        )
        if reason:
            bad.append(f"{label}: {reason}")
    if not bad:
        return [finding("pcie_links", "pass", "GPU links at full width")]
    fix = "Check LnkSta vs LnkCap with `lspci -vv` on the host and reseat or move the card"
    if vm is not False:
        fix += "; in the VM config use `hostpciN: <id>,pcie=1` on a q35 machine"
    return [finding("pcie_links", "warn", f"degraded GPU link(s): {'; '.join(bad)}", fix + ".")]


def _p2p_finding(gpu, vm):
    count = gpu.get("count", 0)
    if count < 2:
        return finding("p2p", "pass", "one GPU: peer-to-peer does not apply")
    p2p = gpu.get("p2p", {})
    status = p2p.get("status", UNKNOWN)
    if status == "ok":
        over = "NVLink" if gpu.get("topology", {}).get("nvlink") else "PCIe"
        return finding(
            "p2p",
            "pass",
            f"P2P OK over {over}: NCCL uses the P2P transport and custom all-reduce can stay on",
        )
    if status in (UNKNOWN, "n/a"):
        return finding(
            "p2p",
            "warn",
            "P2P status unknown (nvidia-smi topo -p2p unreadable)",
            "Run `nvidia-smi topo -p2p r` by hand; until it says OK keep custom all-reduce off.",
        )
    codes = sorted({c for row in p2p.get("read", []) for c in row if c not in ("X", "OK")})
    message = (
        f"P2P {status} ({'/'.join(codes) or 'write'}): NCCL falls back to SHM through host "
        "memory (NCCL_P2P_LEVEL cannot change that) and SGLang custom all-reduce must be off "
        "(--disable-custom-all-reduce)"
    )
    if vm is False:
        fix = (
            "On bare metal check PCIe ACS / IOMMU settings in the firmware and kernel "
            "(iommu=pt); otherwise keep custom all-reduce off."
        )
    else:
        fix = _CLIQUE_FIX
    return finding("p2p", "warn", message, fix)
