# Parsers for nvidia-smi output and the NVIDIA driver's /proc files, and the collector that
# builds the `gpuhost_gpu` fact (schema: docs/facts.md).
#
# Formats relied on (docs/reference.md §5; NVIDIA nvidia-smi(1) and the XML DTD
# nvsmi_device_v12/v13.dtd that ships with the driver):
#   nvidia-smi -q -x            XML, <nvidia_smi_log><gpu id=...>...</gpu></nvidia_smi_log>
#   nvidia-smi topo -m / -p2p   parsed by gpuhost_nvsmi_topo (the topology and p2p parts)
#   /proc/driver/nvidia/version "NVRM version: NVIDIA UNIX Open Kernel Module ..." for the
#                               open module, "... x86_64 Kernel Module ..." otherwise
# Everything here is pure (text in, dict out) except collect_gpu, which only talks to the
# world through a probe object (see gpuhost_hostfacts.Probe), so tests feed recorded output.
#
# gpu_facts ships this file to the host; Ansible's bundler finds the sibling below only
# through an `ansible.module_utils.` import, so that is how it is named (docs/CONVENTIONS.md).

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi_topo import (
    NA,
    UNKNOWN,
    parse_p2p_matrix,
    parse_topo_matrix,
    summarize_p2p,
    summarize_topology,
)

NA_VALUES = {"N/A", "", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error"}


# --------------------------------------------------------------------------------------
# small helpers


def xml_text(node, path):
    """Text of a child element, stripped; None when absent or not applicable."""
    if node is None:
        return None
    child = node.find(path)
    if child is None or child.text is None:
        return None
    value = child.text.strip()
    return None if value in NA_VALUES else value


def _leading_int(value):
    """'143771 MiB' -> 143771, '16x' -> 16, None/'N/A' -> None."""
    if value is None:
        return None
    match = re.match(r"\s*(\d+)", value)
    return int(match.group(1)) if match else None


def _enabled(value):
    if value is None:
        return None
    lowered = value.lower()
    if lowered == "enabled":
        return True
    if lowered == "disabled":
        return False
    return None


def driver_branch(version):
    """'580.159.04' -> 580; anything unparsable -> 'unknown'."""
    match = re.match(r"\s*(\d+)\.", version or "")
    return int(match.group(1)) if match else UNKNOWN


# --------------------------------------------------------------------------------------
# nvidia-smi -q -x


def parse_query_xml(text):
    """Parse `nvidia-smi -q -x`. Returns {driver_version, cuda_version, gpus, unknown}.

    Values that are absent or N/A in the XML become 'unknown' with a reason, so a driver
    that drops a field (the DTD changes between branches) degrades instead of crashing.
    """
    root = ET.fromstring(text)
    unknown = {}
    result = {
        "driver_version": xml_text(root, "driver_version") or UNKNOWN,
        "cuda_version": xml_text(root, "cuda_version") or UNKNOWN,
        "gpus": [],
        "unknown": unknown,
    }
    if result["driver_version"] == UNKNOWN:
        unknown["driver.version"] = "driver_version missing from nvidia-smi -q -x"
    if result["cuda_version"] == UNKNOWN:
        unknown["driver.cuda_driver_version"] = "cuda_version missing from nvidia-smi -q -x"

    for position, gpu in enumerate(root.findall("gpu")):
        where = f"gpus.{position}"
        # minor_number is the /dev/nvidiaN number, not the CUDA/nvidia-smi index; the
        # index is the position in this list (nvidia-smi orders by PCI bus id, as -i does).
        pci = gpu.find("pci")
        gen = pci.find("pci_gpu_link_info/pcie_gen") if pci is not None else None
        widths = pci.find("pci_gpu_link_info/link_widths") if pci is not None else None

        entry = {
            "index": position,
            "name": xml_text(gpu, "product_name") or UNKNOWN,
            "architecture": xml_text(gpu, "product_architecture") or UNKNOWN,
            "uuid": xml_text(gpu, "uuid") or UNKNOWN,
            "pci_bus_id": xml_text(pci, "pci_bus_id") or gpu.get("id") or UNKNOWN,
            # Filled from --query-gpu=compute_cap: the XML does not carry it.
            "compute_capability": UNKNOWN,
            "memory_total_mib": _leading_int(xml_text(gpu, "fb_memory_usage/total")),
            "bar1_total_mib": _leading_int(xml_text(gpu, "bar1_memory_usage/total")),
            "pcie": {
                "gen_current": _leading_int(xml_text(gen, "current_link_gen")),
                "gen_max": _leading_int(xml_text(gen, "max_link_gen")),
                "gen_device_max": _leading_int(xml_text(gen, "max_device_link_gen")),
                "width_current": _leading_int(xml_text(widths, "current_link_width")),
                "width_max": _leading_int(xml_text(widths, "max_link_width")),
            },
            "persistence_mode": _enabled(xml_text(gpu, "persistence_mode")),
            "ecc": _ecc(gpu),
            "virtualization_mode": xml_text(gpu, "gpu_virtualization_mode/virtualization_mode")
            or UNKNOWN,
        }
        for key in ("name", "uuid", "pci_bus_id", "architecture", "virtualization_mode"):
            if entry[key] == UNKNOWN:
                unknown[f"{where}.{key}"] = f"{key} missing or N/A in nvidia-smi -q -x"
        for key in ("memory_total_mib", "bar1_total_mib", "persistence_mode"):
            if entry[key] is None:
                entry[key] = UNKNOWN
                unknown[f"{where}.{key}"] = f"{key} missing or N/A in nvidia-smi -q -x"
        for key, value in list(entry["pcie"].items()):
            if value is None:
                entry["pcie"][key] = UNKNOWN
                unknown[f"{where}.pcie.{key}"] = "missing or N/A in nvidia-smi -q -x"
        entry["pcie"].update(pcie_degradation(entry["pcie"]))
        result["gpus"].append(entry)
    return result


def _ecc(gpu):
    current = xml_text(gpu, "ecc_mode/current_ecc")
    if current is None:
        # Consumer GPUs print N/A: ECC does not exist there, it is not unknown.
        return NA if gpu.find("ecc_mode/current_ecc") is not None else UNKNOWN
    flag = _enabled(current)
    if flag is None:
        return UNKNOWN
    return "enabled" if flag else "disabled"


def pcie_degradation(link):
    """Judge a link: width below max, or a link gen capped below what the GPU can do.

    gen_current below gen_max is not judged: idle GPUs drop to Gen1 to save power and
    return to full speed under load (docs/reference.md §5), so it is not a fault at preflight time.
    """
    reasons = []
    width_cur, width_max = link.get("width_current"), link.get("width_max")
    if isinstance(width_cur, int) and isinstance(width_max, int) and width_cur < width_max:
        reasons.append(f"width x{width_cur} of x{width_max}")
    gen_max, gen_dev = link.get("gen_max"), link.get("gen_device_max")
    if isinstance(gen_max, int) and isinstance(gen_dev, int) and gen_max < gen_dev:
        reasons.append(f"link capped at Gen{gen_max}, GPU can do Gen{gen_dev}")
    return {"degraded": bool(reasons), "degraded_reason": "; ".join(reasons)}


# --------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=index,pci.bus_id,compute_cap --format=csv,noheader


def parse_compute_caps(text):
    """Map PCI bus id (upper case) -> compute capability string ('9.0')."""
    caps = {}
    for line in (text or "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        cap = fields[2]
        if re.fullmatch(r"\d+\.\d+", cap):
            caps[fields[1].upper()] = cap
    return caps


# --------------------------------------------------------------------------------------
# driver flavour


def parse_proc_driver_version(text):
    """/proc/driver/nvidia/version -> {module: open|proprietary|unknown, version}."""
    first = (text or "").splitlines()[0] if text else ""
    version_match = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", first + " ")
    if "Open Kernel Module" in first:
        module = "open"
    elif "Kernel Module" in first:
        module = "proprietary"
    else:
        module = UNKNOWN
    return {"module": module, "version": version_match.group(1) if version_match else UNKNOWN}


def module_from_license(license_text):
    """`modinfo -F license nvidia`: the open module is 'Dual MIT/GPL' (docs/reference.md §5)."""
    value = (license_text or "").strip()
    if value == "Dual MIT/GPL":
        return "open"
    if value == "NVIDIA":
        return "proprietary"
    return UNKNOWN


# --------------------------------------------------------------------------------------
# collector


def empty_gpu_fact():
    return {
        "present": False,
        "driver": {
            "loaded": False,
            "version": UNKNOWN,
            "branch": UNKNOWN,
            "module": UNKNOWN,
            "cuda_driver_version": UNKNOWN,
        },
        "count": 0,
        "gpus": [],
        "pci_devices": [],
        "topology": {
            "labels": [],
            "matrix": [],
            "nvlink": False,
            "worst_path": UNKNOWN,
            "cpu_affinity": [],
            "numa_affinity": [],
        },
        "p2p": {"read": [], "write": [], "all_ok": False, "status": UNKNOWN},
        "unknown": {},
    }


def collect_gpu(probe, nvidia_smi="nvidia-smi", pci_devices=None):
    """Build `gpuhost_gpu` through `probe` (run/read). Never raises on host problems."""
    fact = empty_gpu_fact()
    unknown = fact["unknown"]
    fact["pci_devices"] = list(pci_devices or [])

    rc, out, err = probe.run([nvidia_smi, "-q", "-x"])
    if rc is None or rc != 0:
        reason = _why(nvidia_smi, rc, out, err)
        for key in ("driver.version", "driver.cuda_driver_version", "driver.branch"):
            unknown[key] = reason
        unknown["gpus"] = reason
        unknown["topology"] = reason
        unknown["p2p"] = reason
        fact["count"] = len(fact["pci_devices"])
        fact["present"] = bool(fact["pci_devices"])
        _driver_flavour(probe, fact)
        return fact

    try:
        parsed = parse_query_xml(out)
    except ET.ParseError as exc:
        reason = f"nvidia-smi -q -x output is not XML: {exc}"
        unknown.update({"driver.version": reason, "gpus": reason})
        fact["count"] = len(fact["pci_devices"])
        fact["present"] = bool(fact["pci_devices"])
        _driver_flavour(probe, fact)
        return fact

    fact["driver"]["loaded"] = True
    fact["driver"]["version"] = parsed["driver_version"]
    fact["driver"]["branch"] = driver_branch(parsed["driver_version"])
    fact["driver"]["cuda_driver_version"] = parsed["cuda_version"]
    unknown.update(parsed["unknown"])
    if fact["driver"]["branch"] == UNKNOWN:
        unknown["driver.branch"] = "driver version not parsable"
    fact["gpus"] = parsed["gpus"]
    fact["count"] = len(parsed["gpus"])
    fact["present"] = bool(parsed["gpus"]) or bool(fact["pci_devices"])
    _driver_flavour(probe, fact)

    rc, out, err = probe.run(
        [nvidia_smi, "--query-gpu=index,pci.bus_id,compute_cap", "--format=csv,noheader"]
    )
    caps = parse_compute_caps(out) if rc == 0 else {}
    for i, gpu in enumerate(fact["gpus"]):
        cap = caps.get(str(gpu["pci_bus_id"]).upper())
        if cap:
            gpu["compute_capability"] = cap
        else:
            unknown[f"gpus.{i}.compute_capability"] = (
                _why(nvidia_smi, rc, out, err) if rc != 0 else "compute_cap not reported"
            )

    if fact["count"] == 0:
        fact["topology"]["worst_path"] = NA
        fact["p2p"]["status"] = NA
        return fact

    rc, out, err = probe.run([nvidia_smi, "topo", "-m"])
    if rc == 0:
        try:
            topo = parse_topo_matrix(out)
            fact["topology"].update(topo)
            fact["topology"].update(summarize_topology(topo["matrix"]))
        except ValueError as exc:
            unknown["topology"] = str(exc)
    else:
        unknown["topology"] = _why(nvidia_smi, rc, out, err)

    matrices = {}
    for mode, key in (("r", "read"), ("w", "write")):
        rc, out, err = probe.run([nvidia_smi, "topo", "-p2p", mode])
        if rc != 0:
            unknown[f"p2p.{key}"] = _why(nvidia_smi, rc, out, err)
            continue
        try:
            matrices[key] = parse_p2p_matrix(out)
        except ValueError as exc:
            unknown[f"p2p.{key}"] = str(exc)
    fact["p2p"]["read"] = matrices.get("read", [])
    fact["p2p"]["write"] = matrices.get("write", [])
    if fact["count"] < 2:
        fact["p2p"].update({"all_ok": False, "status": NA})
    elif "read" in matrices and "write" in matrices:
        fact["p2p"].update(summarize_p2p(matrices["read"], matrices["write"]))
    return fact


def _driver_flavour(probe, fact):
    """Open vs proprietary: /proc first (no tool needed), modinfo as the fallback."""
    text = probe.read("/proc/driver/nvidia/version")
    if text:
        parsed = parse_proc_driver_version(text)
        fact["driver"]["module"] = parsed["module"]
        if fact["driver"]["version"] == UNKNOWN and parsed["version"] != UNKNOWN:
            # Module loaded but nvidia-smi missing or broken: the version is still known.
            fact["driver"]["version"] = parsed["version"]
            fact["driver"]["branch"] = driver_branch(parsed["version"])
            fact["unknown"].pop("driver.version", None)
            fact["unknown"].pop("driver.branch", None)
        if parsed["module"] != UNKNOWN:
            return
    rc, out, err = probe.run(["modinfo", "-F", "license", "nvidia"])
    if rc == 0:
        fact["driver"]["module"] = module_from_license(out)
        if fact["driver"]["module"] == UNKNOWN:
            fact["unknown"]["driver.module"] = f"unrecognised module license {out.strip()!r}"
    else:
        fact["unknown"]["driver.module"] = "/proc/driver/nvidia/version absent and " + _why(
            "modinfo", rc, out, err
        )


def _why(tool, rc, out, err):
    if rc is None:
        return err or f"{tool} not found"
    message = (err or out or "").strip().splitlines()
    detail = message[0] if message else "no output"
    return f"{tool} exited {rc}: {detail}"[:300]
