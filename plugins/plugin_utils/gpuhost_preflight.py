# Preflight checks: the inventory's requirements against the gpuhost_gpu / gpuhost_host
# facts (docs/facts.md). Pure: facts and requirements in, findings out; unit-tested in
# tests/test_preflight_checks.py and run by the preflight role through the
# gpuhost_preflight_findings filter.
#
# A finding is {check, status: pass|warn|fail, message, fix} (docs/facts.md). A host with no
# NVIDIA GPU gets one plain warning and no GPU checks, unless the inventory expects GPUs.

from __future__ import annotations

import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import finding
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_guest_checks import (
    numa_findings,
    steal_findings,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_tp import divisors, tp_misfit

UNKNOWN = "unknown"

# GPU models the inventory may name (preflight_expected_gpu_model; the argument spec lists
# the same keys). Each maps to a pattern over the names nvidia-smi (product_name) and lspci
# print, e.g. "NVIDIA H200", "GH100 [H200 SXM 141GB]", "NVIDIA RTX PRO 6000 Blackwell Server
# Edition". Word boundaries keep "L40" from matching "L40S".
GPU_MODELS = {
    "A10": r"\bA10\b",
    "A100": r"\bA100\b",
    "A40": r"\bA40\b",
    "B200": r"\bB200\b",
    "B300": r"\bB300\b",
    "GH200": r"\bGH200\b",
    "H100": r"\bH100\b",
    "H20": r"\bH20\b",
    "H200": r"\bH200\b",
    "L4": r"\bL4\b",
    "L40": r"\bL40\b",
    "L40S": r"\bL40S\b",
    "RTX 3090": r"\bRTX 3090\b",
    "RTX 4090": r"\bRTX 4090\b",
    "RTX 5090": r"\bRTX 5090\b",
    "RTX 6000 Ada": r"\bRTX 6000 Ada\b",
    "RTX A6000": r"\bRTX A6000\b",
    "RTX PRO 6000": r"\bRTX PRO 6000\b",
}


def model_matches(model, name):
    pattern = GPU_MODELS.get(model)
    if pattern is None:
        pattern = r"\b" + re.escape(model) + r"\b"
    return re.search(pattern, name or "", re.IGNORECASE) is not None


def version_at_least(version, minimum):
    def parts(text):
        out = []
        for piece in str(text).split("."):
            if not piece.isdigit():
                break
            out.append(int(piece))
        return out

    have, want = parts(version), parts(minimum)
    if not have:
        return None
    width = max(len(have), len(want))
    return have + [0] * (width - len(have)) >= want + [0] * (width - len(want))


def _names(gpu):
    if gpu.get("gpus"):
        return [g.get("name", UNKNOWN) for g in gpu["gpus"]]
    return [d.get("name", UNKNOWN) for d in gpu.get("pci_devices", [])]


def _links(gpu):
    """(label, link dict) per GPU: driver view when loaded, sysfs view otherwise."""
    if gpu.get("gpus"):
        return [
            (f"GPU{g['index']} {g.get('pci_bus_id', '')}", g.get("pcie", {})) for g in gpu["gpus"]
        ]
    out = []
    for dev in gpu.get("pci_devices", []):
        link = dict(dev.get("link", {}))
        reasons = []
        cur, top = link.get("width_current"), link.get("width_max")
        if isinstance(cur, int) and isinstance(top, int) and cur < top:
            reasons.append(f"width x{cur} of x{top}")
        link["degraded"] = bool(reasons)
        link["degraded_reason"] = "; ".join(reasons)
        out.append((dev.get("bus_id", "?"), link))
    return out


def preflight_findings(gpu, host, req):
    """Findings for the inventory requirements `req`:

    expected_gpu_count (int, 0 = any), expected_gpu_model (str, '' = any),
    min_driver_version (str, '' = any), required_free_disk_gib (int), nodes (int: the hosts of
    this host's serving group, 1 alone; TP is checked per node), tp_size (int, 0 = not
    set), p2p_required (bool), pcie_degraded_policy (warn|fail|ignore), steal_warn_percent
    (number, default 5).
    """
    out = []
    expected = int(req.get("expected_gpu_count") or 0)
    driver = gpu.get("driver", {})
    loaded = bool(driver.get("loaded"))
    count = int(gpu.get("count") or 0)
    where = "" if loaded else " on the PCI bus (driver not loaded)"

    out.extend(_init_findings(host))
    out.extend(steal_findings(host, float(req.get("steal_warn_percent") or 5)))
    out.extend(_disk_findings(host, int(req.get("required_free_disk_gib") or 0)))

    if not gpu.get("present"):
        if expected > 0:
            out.append(
                finding(
                    "preflight.gpu_present",
                    "fail",
                    f"no NVIDIA GPU present, {expected} expected",
                    "Pass the GPUs through to this host (Proxmox: hostpciN with pcie=1) and "
                    "check `lspci -nn -d 10de:`; or set preflight_expected_gpu_count: 0.",
                )
            )
        else:
            out.append(
                finding(
                    "preflight.gpu_present",
                    "warn",
                    "no NVIDIA GPU present: GPU checks skipped",
                    "None needed on a test container; on a GPU host pass the GPUs through.",
                )
            )
        return out
    out.append(finding("preflight.gpu_present", "pass", f"{count} NVIDIA GPU(s) present{where}"))

    # Count
    if expected > 0 and count != expected:
        out.append(
            finding(
                "preflight.gpu_count",
                "fail",
                f"{count} GPU(s) present{where}, {expected} expected",
                "Pass all GPUs through to the VM (one hostpciN each) or correct "
                "preflight_expected_gpu_count.",
            )
        )
    elif expected > 0:
        out.append(finding("preflight.gpu_count", "pass", f"{count} GPU(s), {expected} expected"))

    # Model
    model = req.get("expected_gpu_model") or ""
    if model:
        names = _names(gpu)
        known = [n for n in names if n != UNKNOWN]
        wrong = [n for n in known if not model_matches(model, n)]
        if wrong:
            out.append(
                finding(
                    "preflight.gpu_model",
                    "fail",
                    f"expected {model}, found {', '.join(sorted(set(wrong)))}",
                    "Correct preflight_expected_gpu_model, or check which GPUs are passed through.",
                )
            )
        elif len(known) < len(names):
            out.append(
                finding(
                    "preflight.gpu_model",
                    "warn",
                    f"expected {model}; GPU names unreadable{where}",
                    "Install pciutils (lspci), or re-run after the driver is installed.",
                )
            )
        else:
            out.append(
                finding("preflight.gpu_model", "pass", f"all {len(known)} GPU(s) are {model}")
            )

    out.extend(_driver_findings(gpu, req.get("min_driver_version") or ""))
    tp_name = req.get("tp_size_name") or "preflight_tp_size"
    nodes = int(req.get("nodes") or 1)
    out.extend(_tp_findings(count, int(req.get("tp_size") or 0), where, tp_name, nodes))
    out.extend(_p2p_findings(gpu, bool(req.get("p2p_required")), loaded))
    out.extend(_link_findings(gpu, req.get("pcie_degraded_policy") or "warn"))
    out.extend(numa_findings(gpu, host))

    if host.get("secure_boot") == "enabled" and not loaded:
        out.append(
            finding(
                "preflight.secure_boot",
                "warn",
                "Secure Boot is enabled and the NVIDIA module is not loaded yet",
                "The DKMS-built module must be signed with an enrolled MOK key "
                "(mokutil --import), or Secure Boot turned off.",
            )
        )
    return out


def _init_findings(host):
    """gpuhost runs everything it serves as systemd units: a host booted without systemd (a
    plain container, a chroot) cannot take them, so preflight says so before any change."""
    init = host.get("init")
    if not isinstance(init, dict):  # a fact cache written before gpuhost_host.init existed
        return []
    booted, pid1 = init.get("systemd"), init.get("pid1", UNKNOWN)
    if booted is True:
        return [
            finding(
                "preflight.systemd",
                "pass",
                "booted with systemd (PID 1 is systemd)"
                if pid1 == "systemd"
                else f"booted with systemd (PID 1 is {pid1!r})",
            )
        ]
    if booted is False:
        return [
            finding(
                "preflight.systemd",
                "fail",
                f"not booted with systemd: PID 1 is {pid1!r} and /run/systemd/system is absent; "
                "gpuhost runs the SGLang server, the model download, the router and the "
                "exporters as systemd units",
                "Run gpuhost against a host booted with systemd (a VM, bare metal, or a "
                "container whose command is /lib/systemd/systemd - docs/check-mode.md).",
            )
        ]
    return [
        finding(
            "preflight.systemd",
            "warn",
            "could not tell whether the host was booted with systemd: "
            + host.get("unknown", {}).get("init.systemd", "no evidence read"),
            "Check that /run/systemd/system exists on the host (`systemctl is-system-running`).",
        )
    ]


def _disk_findings(host, required):
    out = []
    for path, info in sorted((host.get("disk") or {}).items()):
        free = info.get("free_gib")
        if not isinstance(free, int):
            out.append(
                finding(
                    "preflight.disk",
                    "warn" if required else "pass",
                    f"free space on {path} unknown: "
                    + host.get("unknown", {}).get("disk." + path, ""),
                    "Check the path and its mount." if required else "",
                )
            )
        elif required and free < required:
            out.append(
                finding(
                    "preflight.disk",
                    "fail",
                    f"{free} GiB free on {info.get('probe_path', path)} for {path}, "
                    f"{required} GiB needed",
                    "Free space, grow the disk, or point gpuhost_cache_dir at a larger disk.",
                )
            )
        else:
            need = f", {required} GiB needed" if required else ""
            out.append(finding("preflight.disk", "pass", f"{free} GiB free for {path}{need}"))
    return out


def _driver_findings(gpu, minimum):
    driver = gpu.get("driver", {})
    if not driver.get("loaded"):
        return [
            finding(
                "preflight.driver",
                "warn",
                "NVIDIA driver not loaded: "
                + gpu.get("unknown", {}).get("driver.version", "nvidia-smi did not answer"),
                "The nvidia_driver role installs it; if it is installed, load it "
                "(modprobe nvidia) and read dmesg.",
            )
        ]
    version, module = driver.get("version", UNKNOWN), driver.get("module", UNKNOWN)
    text = f"driver {version} ({module} module), CUDA {driver.get('cuda_driver_version')}"
    out = []
    ok = version_at_least(version, minimum) if minimum else True
    if ok is False:
        out.append(
            finding(
                "preflight.driver",
                "fail",
                f"{text}: below the minimum {minimum}",
                "Install a newer driver branch (nvidia_driver role) or lower "
                "preflight_min_driver_version.",
            )
        )
    elif ok is None:
        out.append(
            finding(
                "preflight.driver",
                "warn",
                f"{text}: version unreadable",
                "Check `nvidia-smi --version` by hand.",
            )
        )
    else:
        need = f" >= {minimum}" if minimum else ""
        out.append(finding("preflight.driver", "pass", f"{text}{need}"))
    blackwell = any(g.get("architecture") == "Blackwell" for g in gpu.get("gpus", []))
    if module == "proprietary" and blackwell:
        out.append(
            finding(
                "preflight.driver_module",
                "fail",
                "Blackwell GPUs with the proprietary kernel module (they need the open one)",
                "Install the open flavour (nvidia-open / nvidia-driver-<branch>-open).",
            )
        )
    elif module == UNKNOWN:
        out.append(
            finding(
                "preflight.driver_module",
                "warn",
                "kernel module flavour unknown: " + gpu.get("unknown", {}).get("driver.module", ""),
                "Check `modinfo -F license nvidia` (Dual MIT/GPL = open).",
            )
        )
    return out


def _tp_findings(count, tp, where, name, nodes=1):
    """TP against this host's GPUs; in a serving group of `nodes` hosts, its share per host
    (TP x PP splitting over the nodes is the profile's check, gpuhost_profile.py)."""
    if tp <= 0:
        return []
    if nodes > 1:
        if tp % nodes:
            return [
                finding(
                    "preflight.tp_size",
                    "fail",
                    f"{name}: got {tp}; allowed: a multiple of the serving group's {nodes} "
                    "nodes (each node runs the same share)",
                    f"Set {name} to {nodes} x a divisor of the GPU count ({divisors(count)}).",
                )
            ]
        name, tp = f"{name} / {nodes} nodes (got {tp})", tp // nodes
    message = tp_misfit(name, tp, count, f"the GPUs found{where}")
    if message:
        return [
            finding(
                "preflight.tp_size",
                "fail",
                message,
                f"Set {name} to a divisor of the GPU count ({divisors(count)}).",
            )
        ]
    return [finding("preflight.tp_size", "pass", f"TP size {tp} fits {count} GPU(s)")]


def _p2p_findings(gpu, required, loaded):
    count = int(gpu.get("count") or 0)
    if count < 2:
        return [finding("preflight.p2p", "pass", "one GPU: peer-to-peer not needed")]
    p2p = gpu.get("p2p", {})
    status = p2p.get("status", UNKNOWN)
    topo = gpu.get("topology", {})
    over = "NVLink" if topo.get("nvlink") else f"PCIe (worst path {topo.get('worst_path')})"
    if status == "ok":
        return [finding("preflight.p2p", "pass", f"P2P read/write OK between all GPUs over {over}")]
    if status in ("unknown", "n/a"):
        reason = p2p_reason(gpu) if loaded else "driver not loaded"
        return [
            finding(
                "preflight.p2p",
                "fail" if required and loaded else "warn",
                f"P2P status unknown: {reason}",
                "Re-run preflight once the driver is loaded."
                if not loaded
                else "Run `nvidia-smi topo -p2p r` by hand to see why it fails.",
            )
        ]
    codes = sorted({c for row in p2p.get("read", []) for c in row if c not in ("X", "OK")})
    return [
        finding(
            "preflight.p2p",
            "fail" if required else "warn",
            f"P2P {status} ({'/'.join(codes) or 'write'} in topo -p2p): NCCL falls back to SHM "
            "through host memory and custom all-reduce must be off",
            "In a Proxmox VM see the proxmox_guest findings (x-nv-gpudirect-clique); or set "
            "preflight_p2p_required: false to accept the SHM path.",
        )
    ]


def p2p_reason(gpu):
    unknown = gpu.get("unknown", {})
    return unknown.get("p2p.read") or unknown.get("p2p.write") or unknown.get("p2p") or "not read"


def _link_findings(gpu, policy):
    links = _links(gpu)
    bad = [(label, link) for label, link in links if link.get("degraded")]
    if not bad:
        widths = {link.get("width_max") for _, link in links}
        gens = {link.get("gen_max") for _, link in links}
        shape = ""
        if len(widths) == 1 and len(gens) == 1:
            shape = f" (x{widths.pop()} Gen{gens.pop()} max)"
        return [
            finding("preflight.pcie_links", "pass", f"{len(links)} link(s) at full width{shape}")
        ]
    detail = "; ".join(f"{label}: {link.get('degraded_reason')}" for label, link in bad)
    if policy == "ignore":
        return [finding("preflight.pcie_links", "pass", f"degraded (ignored by policy): {detail}")]
    return [
        finding(
            "preflight.pcie_links",
            "fail" if policy == "fail" else "warn",
            f"{len(bad)} of {len(links)} GPU link(s) degraded: {detail}",
            "Reseat the card or move it to a full x16 slot; check `lspci -vv` LnkSta against "
            "LnkCap on the host; in Proxmox use hostpciN with pcie=1 on a q35 VM.",
        )
    ]
