# Copyright: gpuhost contributors
# Apache-2.0
"""`gpuhost doctor`: health checks of a serving host over recorded tool output.

Everything here is pure (captured text in, findings out) except collect(), which reads the
host only through a gpuhost_hostfacts.Probe, so tests feed recorded or made captures. The
module gpuhost_doctor runs collect() and judge() on the host: the drift check compares the
server's env file, which holds the API key, and only variable names leave the host.

Formats relied on (docs/day2.md lists the public sources):
  nvidia-smi -q -x      nvsmi_device_v12/v13.dtd: <ecc_errors>, <retired_pages>,
                        <remapped_rows>, <clocks_event_reasons> (<clocks_throttle_reasons>
                        before driver 535), <gpu_power_readings> (<power_readings> before
                        530), <utilization>, <pci>, <processes>
  kernel log            "NVRM: Xid (PCI:0000:01:00): 79, pid=..., GPU has fallen off the bus."
  systemctl show        KEY=VALUE lines (NRestarts, ExecMainStartTimestamp, ControlGroup)
  clocks_event_reasons.active   the NVML bit mask (nvml.h nvmlClocksEventReason*)
"""

from __future__ import annotations

import hashlib
import re
import xml.etree.ElementTree as ET

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi import (
    NA_VALUES,
    parse_proc_driver_version,
    parse_query_xml,
    xml_text,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_proxmox import scan_dmesg

PREFIX = "doctor."
GIB = 1024**3

# Xid codes that mean lost data or a GPU that needs a reset (NVIDIA "Xid Errors" catalogue):
# 48 DBE, 63/64 row remapping event/failure, 74 NVLink, 79 fallen off the bus, 92 high SBE
# rate, 94/95 contained/uncontained ECC, 119/120 GSP, 154 recovery action required.
DEFAULT_XID_FAIL = (48, 64, 74, 79, 92, 94, 95, 119, 120, 154)

# nvml.h nvmlClocksEventReason* bits, and which of them are a fault worth a finding.
EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}
# reason -> (status, what it means, the fix)
EVENT_JUDGEMENT = {
    "sw_power_cap": (
        "warn",
        "clocks held down by the power limit",
        "compare power.draw with power.limit; raise the limit to the board default "
        "(nvidia-smi -pl) or accept it; check that the limit was not lowered by a policy",
    ),
    "sync_boost": (
        "warn",
        "clocks held to the slowest GPU of a sync-boost group",
        "look for one GPU of the group that is throttled (thermal or power) and fix that one",
    ),
    "sw_thermal_slowdown": (
        "warn",
        "driver lowered clocks: GPU or memory too hot",
        "check the airflow, fan curves and inlet temperature of the chassis",
    ),
    "hw_thermal_slowdown": (
        "fail",
        "hardware thermal slowdown: the GPU is too hot",
        "check cooling now (fans, airflow, blocked inlets); the GPU halves its clocks",
    ),
    "hw_power_brake_slowdown": (
        "fail",
        "hardware power brake: the power supply asserted the brake signal",
        "check the PSUs and their redundancy; the board runs at minimum clocks",
    ),
    "hw_slowdown": (
        "fail",
        "hardware slowdown (thermal, power brake or the board's power sensor)",
        "check cooling and power supply; read the other reasons and nvidia-smi -q -d PERFORMANCE",
    ),
}
# <clocks_event_reasons> element names by reason (also under <clocks_throttle_reasons>).
_EVENT_TAGS = ("clocks_event_reason_", "clocks_throttle_reason_")

# Server journal: what a healthy SGLang server never prints.
JOURNAL_PATTERNS = {
    "nan": re.compile(
        r"\bNaN\b|\b(?:nan|inf)\b.{0,40}\b(?:detect|found|logit|prob)|"
        r"\b(?:detect|found|logit|prob)\w*\b.{0,40}\b(?:nan|inf)\b|non-finite",
        re.IGNORECASE,
    ),
    "oom": re.compile(
        r"CUDA out of memory|OutOfMemoryError|out of memory|Not enough memory|"
        r"cudaErrorMemoryAllocation",
        re.IGNORECASE,
    ),
    "nccl": re.compile(
        r"NCCL (?:WARN|error)|nccl\w*Error|ncclInternalError|ncclSystemError|"
        r"ncclUnhandledCudaError|NCCL communicator was aborted|Watchdog caught collective",
        re.IGNORECASE,
    ),
    "cuda": re.compile(
        r"CUDA error|illegal memory access|device-side assert|cudaError\w+", re.IGNORECASE
    ),
}
JOURNAL_FIX = {
    "nan": "a non-finite value means garbled output: check --kv-cache-dtype (fp8 KV on SM120 "
    "garbles), the quantisation and the model revision; gpuhost verify asks known questions",
    "oom": "lower --mem-fraction-static or --max-running-requests / --cuda-graph-max-bs, or "
    "free the GPU memory another process holds",
    "nccl": "read the NCCL lines; compare nccl.env with what role nccl derived (gpuhost check "
    "--fail-on-drift) and re-run the nccl role's all-reduce sweep",
    "cuda": "a CUDA fault: look for Xid events at the same time in the kernel log; restart the "
    "server, and if it repeats, the GPU",
}


finding = prefixed(PREFIX)


# --------------------------------------------------------------------------------------
# parsers


def _number(value):
    """'79.40 W' -> 79.4, '16x' -> 16.0, '1053 KB/s' -> 1053.0, N/A -> None."""
    if value is None:
        return None
    match = re.match(r"\s*(-?\d+(?:\.\d+)?)", value)
    return float(match.group(1)) if match else None


def _int(value):
    number = _number(value)
    return None if number is None else int(number)


def _yes(value):
    return None if value is None else value.strip().lower() in ("yes", "active", "enabled")


def _first(gpu, *paths):
    for path in paths:
        node = gpu.find(path)
        if node is not None:
            return node
    return None


def parse_health_xml(text):
    """Per GPU what doctor judges, from `nvidia-smi -q -x`: {driver_version, gpus: [...]}.

    Older drivers name the sections differently (clocks_throttle_reasons, power_readings);
    both spellings are read. An absent or N/A value is None, never 0.
    """
    root = ET.fromstring(text)
    base = parse_query_xml(text)
    gpus = []
    for position, gpu in enumerate(root.findall("gpu")):
        common = base["gpus"][position]
        events = {}
        section = _first(gpu, "clocks_event_reasons", "clocks_throttle_reasons")
        for child in list(section) if section is not None else []:
            for prefix in _EVENT_TAGS:
                if child.tag.startswith(prefix):
                    events[child.tag[len(prefix) :]] = _yes(child.text)
        counters = {}
        section = _first(gpu, "clocks_event_reasons_counters")
        for child in list(section) if section is not None else []:
            name = child.tag.replace("clocks_event_reasons_counters_", "")
            counters[name] = _int(child.text)
        power = _first(gpu, "gpu_power_readings", "power_readings")
        ecc = {}
        for scope in ("volatile", "aggregate"):
            node = gpu.find(f"ecc_errors/{scope}")
            ecc[scope] = {
                child.tag: _int(child.text)
                for child in (list(node) if node is not None else [])
                if _int(child.text) is not None
            }
        retired = {}
        for cause in ("multiple_single_bit_retirement", "double_bit_retirement"):
            retired[cause] = _int(xml_text(gpu, f"retired_pages/{cause}/retired_count"))
        retired["pending"] = _yes(xml_text(gpu, "retired_pages/pending_blacklist")) or _yes(
            xml_text(gpu, "retired_pages/pending_retirement")
        )
        remap = gpu.find("remapped_rows")
        processes = []
        for proc in gpu.findall("processes/process_info"):
            processes.append(
                {
                    "pid": _int(xml_text(proc, "pid")),
                    "name": xml_text(proc, "process_name") or "?",
                    "type": xml_text(proc, "type") or "",
                    "used_mib": _int(xml_text(proc, "used_memory")),
                }
            )
        gpus.append(
            {
                "index": common["index"],
                "name": common["name"],
                "pci_bus_id": common["pci_bus_id"],
                "persistence_mode": common["persistence_mode"],
                "ecc_mode": common["ecc"],
                "pcie": common["pcie"],
                "pcie_tx_kbs": _number(xml_text(gpu, "pci/tx_util")),
                "pcie_rx_kbs": _number(xml_text(gpu, "pci/rx_util")),
                "util_gpu": _number(xml_text(gpu, "utilization/gpu_util")),
                "util_mem": _number(xml_text(gpu, "utilization/memory_util")),
                "events": events,
                "event_counters_us": counters,
                "power_draw_w": _number(
                    xml_text(power, "average_power_draw") or xml_text(power, "power_draw")
                ),
                "power_limit_w": _number(
                    xml_text(power, "current_power_limit") or xml_text(power, "power_limit")
                ),
                "power_default_w": _number(xml_text(power, "default_power_limit")),
                "power_max_w": _number(xml_text(power, "max_power_limit")),
                "ecc": ecc,
                "retired": retired,
                "remapped": None
                if remap is None
                else {
                    "corr": _int(xml_text(remap, "remapped_row_corr")),
                    "unc": _int(xml_text(remap, "remapped_row_unc")),
                    "pending": _yes(xml_text(remap, "remapped_row_pending")),
                    "failure": _yes(xml_text(remap, "remapped_row_failure")),
                },
                "processes": processes,
            }
        )
    return {"driver_version": base["driver_version"], "gpus": gpus}


def decode_event_reasons(mask):
    """NVML clocks event bit mask ('0x0000000000000004' or an int) -> reason names."""
    if isinstance(mask, str):
        text = mask.strip()
        if text in NA_VALUES:
            return None
        try:
            mask = int(text, 16) if text.lower().startswith("0x") else int(text)
        except ValueError:
            return None
    return [name for bit, name in sorted(EVENT_BITS.items()) if mask & bit]


def parse_systemctl_show(text):
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_env(text):
    """KEY=VALUE lines of an EnvironmentFile (comments and blanks skipped)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def nvml_library_versions(names):
    """'libnvidia-ml.so.580.159.04' file names -> {'580.159.04'}."""
    found = set()
    for name in names or []:
        match = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", name)
        if match:
            found.add(match.group(1))
    return found


# --------------------------------------------------------------------------------------
# checks: each takes parsed captures and returns findings


def check_xid(kernel_log, fail_codes=DEFAULT_XID_FAIL):
    if kernel_log is None:
        return [
            finding(
                "xid",
                "warn",
                "kernel log not readable: Xid events not checked",
                "run doctor with become (journalctl -k / dmesg need root with dmesg_restrict)",
            )
        ]
    events = scan_dmesg(kernel_log)["xid"]
    if not events:
        return [finding("xid", "pass", "no Xid events in the kernel log since boot")]
    codes = sorted({code for _, code in events})
    severe = [c for c in codes if c in fail_codes]
    where = sorted({bus for bus, _ in events})
    return [
        finding(
            "xid",
            "fail" if severe else "warn",
            f"{len(events)} Xid event(s) since boot on {', '.join(where)}: codes "
            f"{', '.join(map(str, codes))}"
            + (f" (needs attention: {', '.join(map(str, severe))})" if severe else ""),
            "look each code up in NVIDIA's Xid catalogue; 48/63/64/94/95 are memory errors "
            "(reset the GPU, watch remapped rows), 79 and 154 need a GPU reset or host reboot, "
            "13/31/43 are usually the application's fault",
        )
    ]


def _gpu_label(gpu):
    return f"GPU{gpu['index']}"


def check_memory_errors(gpus):
    """Remapped rows (Ampere and later) or retired pages (before), and ECC counters."""
    out = []
    fail, warn = [], []
    for gpu in gpus:
        label = _gpu_label(gpu)
        remap = gpu.get("remapped")
        if remap:
            if remap.get("failure"):
                fail.append(f"{label} row remapping failed (no spare rows left)")
            if remap.get("pending"):
                warn.append(f"{label} row remap pending (takes effect at the next GPU reset)")
            if remap.get("unc"):
                warn.append(f"{label} {remap['unc']} row(s) remapped for uncorrectable errors")
        retired = gpu.get("retired") or {}
        if retired.get("pending"):
            warn.append(f"{label} page retirement pending (GPU reset needed)")
        dbe = retired.get("double_bit_retirement")
        if dbe:
            warn.append(f"{label} {dbe} page(s) retired for double-bit errors")
    if fail:
        out.append(
            finding(
                "remapped_rows",
                "fail",
                "; ".join(fail + warn),
                "the GPU is out of spare memory rows: have it replaced (RMA); NVIDIA's memory "
                "error recovery guide says a remapping failure cannot be repaired in the field",
            )
        )
    elif warn:
        out.append(
            finding(
                "remapped_rows",
                "warn",
                "; ".join(warn),
                "drain the host and reset the GPU (nvidia-smi -r or a reboot) so the pending "
                "remap takes effect; repeated remaps mean the GPU should be replaced",
            )
        )
    else:
        out.append(finding("remapped_rows", "pass", "no remapped or retired memory pending"))

    unc, corr, off = [], [], []
    for gpu in gpus:
        label = _gpu_label(gpu)
        if gpu.get("ecc_mode") == "disabled":
            off.append(label)
        volatile = (gpu.get("ecc") or {}).get("volatile") or {}
        n_unc = sum(v for k, v in volatile.items() if "uncorrectable" in k and v)
        n_corr = sum(v for k, v in volatile.items() if k.endswith("correctable") and "un" not in k)
        if n_unc:
            unc.append(f"{label} {n_unc} uncorrectable")
        if n_corr:
            corr.append(f"{label} {n_corr} corrected")
    if unc:
        out.append(
            finding(
                "ecc",
                "fail",
                "ECC errors since the driver loaded: " + "; ".join(unc + corr),
                "uncorrectable errors corrupt results: drain the host, reset the GPU, and "
                "replace it if they return (see the remapped rows and Xid 48/94/95)",
            )
        )
    elif corr or off:
        msgs = list(corr) + [f"{g} ECC disabled" for g in off]
        out.append(
            finding(
                "ecc",
                "warn",
                "; ".join(msgs),
                "corrected errors are harmless alone but a rising count precedes failures: "
                "watch it; enable ECC with nvidia-smi -e 1 and a reboot",
            )
        )
    else:
        out.append(finding("ecc", "pass", "no ECC errors since the driver loaded"))
    return out


def check_clocks(gpus, query_masks=None):
    """Active clocks event reasons (XML, else the --query-gpu bit mask)."""
    by_reason = {}
    for gpu in gpus:
        active = {k for k, v in (gpu.get("events") or {}).items() if v}
        mask = (query_masks or {}).get(gpu["index"])
        if not gpu.get("events") and mask is not None:
            active = set(decode_event_reasons(mask) or [])
        for reason in active:
            if reason in EVENT_JUDGEMENT:
                by_reason.setdefault(reason, []).append(_gpu_label(gpu))
    if not by_reason:
        return [finding("clocks", "pass", "no power, thermal or sync-boost clock events active")]
    out = []
    for reason, labels in sorted(by_reason.items()):
        status, meaning, fix = EVENT_JUDGEMENT[reason]
        out.append(
            finding(f"clocks.{reason}", status, f"{', '.join(labels)}: {reason} - {meaning}", fix)
        )
    return out


def check_power_limit(gpus):
    capped, unknown = [], []
    for gpu in gpus:
        limit, default = gpu.get("power_limit_w"), gpu.get("power_default_w")
        if limit is None or default is None:
            unknown.append(_gpu_label(gpu))
        elif limit < default - 0.5:
            capped.append(f"{_gpu_label(gpu)} {limit:.0f} W of {default:.0f} W default")
    if capped:
        return [
            finding(
                "power_limit",
                "warn",
                "power limit below the board default: " + "; ".join(capped),
                "restore it with nvidia-smi -pl <default> (and remove whatever lowers it at "
                "boot), unless the cap is wanted for the room's power budget",
            )
        ]
    if unknown and len(unknown) == len(gpus):
        return [finding("power_limit", "warn", "power limits not reported", "")]
    return [finding("power_limit", "pass", "power limit at the board default on every GPU")]


def check_pcie(gpus, load_util=50):
    """Width below max is always a fault; a lower gen only under load (idle GPUs downshift)."""
    bad, idle = [], []
    for gpu in gpus:
        link = gpu.get("pcie") or {}
        label = _gpu_label(gpu)
        if link.get("degraded"):
            bad.append(f"{label} {link['degraded_reason']}")
        cur, best = link.get("gen_current"), link.get("gen_max")
        if isinstance(cur, int) and isinstance(best, int) and cur < best:
            util = gpu.get("util_gpu")
            if util is not None and util >= load_util:
                bad.append(f"{label} Gen{cur} of Gen{best} at {util:.0f}% utilisation")
            else:
                idle.append(f"{label} Gen{cur} of Gen{best} while idle")
    if bad:
        return [
            finding(
                "pcie",
                "warn",
                "PCIe link below its maximum: " + "; ".join(bad),
                "reseat the GPU or its riser, check the slot's BIOS setting (Gen/bifurcation) "
                "and, in a VM, the passthrough's link speed; lspci -vv shows LnkSta vs LnkCap",
            )
        ]
    note = f" ({'; '.join(idle)}: power saving, judged under load only)" if idle else ""
    return [finding("pcie", "pass", "PCIe links at their maximum width" + note)]


def check_persistence(gpus):
    off = [_gpu_label(g) for g in gpus if g.get("persistence_mode") is False]
    if off:
        return [
            finding(
                "persistence",
                "warn",
                f"persistence mode off on {', '.join(off)}: the driver unloads between "
                "clients, so every start pays the initialisation and ECC scrub",
                "enable nvidia-persistenced (nvidia_driver_persistenced: true, gpuhost "
                "provision) or systemctl enable --now nvidia-persistenced",
            )
        ]
    return [finding("persistence", "pass", "persistence mode on")]


def check_versions(smi_rc, smi_text, xml_driver, proc_text, nvml_libs):
    """The kernel module, NVML (nvidia-smi) and the user-space libraries must agree."""
    text = smi_text or ""
    fix = (
        "the driver was upgraded without reloading the kernel module: reboot (or stop every "
        "GPU client and reload nvidia*); nvidia_driver_reboot decides when gpuhost reboots"
    )
    if "version mismatch" in text.lower():
        line = next(
            (line for line in text.splitlines() if "mismatch" in line.lower()), text.strip()
        )
        return [finding("versions", "fail", f"nvidia-smi: {line.strip()}", fix)]
    kernel = parse_proc_driver_version(proc_text)["version"] if proc_text else None
    kernel = None if kernel in (None, "unknown") else kernel
    problems = []
    if kernel and xml_driver and kernel != xml_driver:
        problems.append(f"kernel module {kernel}, NVML {xml_driver}")
    libs = nvml_library_versions(nvml_libs)
    other = sorted(v for v in libs if v not in (xml_driver, kernel))
    if other:
        problems.append(f"libnvidia-ml {', '.join(other)} beside driver {xml_driver or kernel}")
    if problems:
        return [finding("versions", "fail", "driver versions differ: " + "; ".join(problems), fix)]
    seen = ", ".join(f"{k} {v}" for k, v in (("module", kernel), ("NVML", xml_driver)) if v)
    return [finding("versions", "pass", f"driver versions agree ({seen or 'one version'})")]


def check_processes(gpus, server_pids, service):
    """GPU memory held by processes outside the server's cgroup."""
    foreign = []
    hidden = False
    for gpu in gpus:
        for proc in gpu.get("processes") or []:
            if proc.get("pid") is None:
                hidden = True
                continue
            if proc["pid"] not in server_pids:
                mib = proc.get("used_mib")
                foreign.append(
                    f"{_gpu_label(gpu)} pid {proc['pid']} {proc['name']}"
                    + (f" {mib} MiB" if mib is not None else "")
                )
    if foreign:
        return [
            finding(
                "processes",
                "warn",
                f"GPU memory held outside {service}: " + "; ".join(foreign),
                "stop those processes (the server sizes its KV cache from the free memory at "
                "start, and a later allocation by another process can run it out of memory)",
            )
        ]
    note = " (process ids not visible here: a container or VM hides them)" if hidden else ""
    return [finding("processes", "pass", f"no other process holds GPU memory{note}")]


def check_server(state, journal, service, max_restarts=0):
    """The unit's restarts and its journal since the current start."""
    if not state or state.get("LoadState") in (None, "", "not-found"):
        return [
            finding(
                "server",
                "warn",
                f"{service}.service is not installed: server checks skipped",
                "gpuhost provision installs it (role sglang_server)",
            )
        ]
    out = []
    active = state.get("ActiveState", "unknown")
    restarts = _int(state.get("NRestarts"))
    if active != "active":
        out.append(
            finding(
                "server",
                "fail",
                f"{service} is {active} ({state.get('SubState', '?')}, result "
                f"{state.get('Result', '?')})",
                f"journalctl -u {service} shows why; gpuhost provision starts it health-gated",
            )
        )
    elif restarts and restarts > max_restarts:
        out.append(
            finding(
                "server",
                "warn",
                f"{service} restarted {restarts} time(s) by systemd (Restart=on-failure) since "
                "it was last started",
                f"journalctl -u {service} -b shows each crash; look at the lines below",
            )
        )
    else:
        since = state.get("ExecMainStartTimestamp") or "?"
        out.append(finding("server", "pass", f"{service} active since {since}, no restarts"))
    hits = scan_journal(journal)
    for kind, lines in hits.items():
        if lines:
            out.append(
                finding(
                    f"journal.{kind}",
                    "warn",
                    f"{len(lines)} line(s) since the server's start, e.g. {lines[0][:200]}",
                    JOURNAL_FIX[kind],
                )
            )
    if not any(hits.values()):
        out.append(
            finding(
                "journal",
                "pass",
                "no NaN/inf, out-of-memory, NCCL or CUDA errors in the journal since the start",
            )
        )
    return out


def scan_journal(text):
    hits = {kind: [] for kind in JOURNAL_PATTERNS}
    for line in (text or "").splitlines():
        for kind, pattern in JOURNAL_PATTERNS.items():
            if pattern.search(line):
                hits[kind].append(line.strip())
                break
    return hits


def check_disk(path, free_bytes, total_bytes, warn_gib, fail_gib):
    if free_bytes is None:
        return [finding("disk", "warn", f"{path}: not found, free space not checked", "")]
    free = free_bytes / GIB
    share = (
        f" ({free_bytes / total_bytes:.0%} of {total_bytes / GIB:.0f} GiB)" if total_bytes else ""
    )
    message = f"{free:.1f} GiB free on {path}{share}"
    fix = (
        "free space in the cache (old model revisions under HF_HOME, JIT caches under "
        "triton/flashinfer) or move gpuhost_cache_dir to a larger disk"
    )
    if free < fail_gib:
        return [finding("disk", "fail", message + f", below {fail_gib} GiB", fix)]
    if free < warn_gib:
        return [finding("disk", "warn", message + f", below {warn_gib} GiB", fix)]
    return [finding("disk", "pass", message)]


def _sha(text):
    return hashlib.sha256((text or "").encode()).hexdigest()[:12]


def _lines_diff(live, kept):
    a = [line for line in (kept or "").splitlines() if line.strip() and not line.startswith("#")]
    b = [line for line in (live or "").splitlines() if line.strip() and not line.startswith("#")]
    gone = [line for line in a if line not in b]
    new = [line for line in b if line not in a]
    return gone, new


def check_drift(unit, unit_kept, env, env_kept, nccl_env, service):
    """The live unit and env against the copies gpuhost kept when it last gated the server
    healthy, and nccl.env against the NCCL block of the env. Only names leave: the env
    holds the API key."""
    if unit is None:
        return []  # no server: check_server says so
    if unit_kept is None:
        return [
            finding(
                "drift",
                "warn",
                "no known-good copy of the unit: gpuhost never saw this server healthy",
                "gpuhost provision (it keeps the unit and env once the server passes its gate)",
            )
        ]
    out = []
    drifted = []
    gone, new = _lines_diff(unit, unit_kept)
    if gone or new:
        keys = sorted({line.split("=", 1)[0] for line in gone + new})
        drifted.append(f"unit ({', '.join(keys)})")
    live_env, kept_env = parse_env(env), parse_env(env_kept)
    keys = sorted(k for k in set(live_env) | set(kept_env) if live_env.get(k) != kept_env.get(k))
    if keys:
        drifted.append(f"env ({', '.join(keys)})")
    if nccl_env is not None:
        wanted = parse_env(nccl_env)
        off = sorted(k for k, v in wanted.items() if live_env.get(k) != v)
        if off:
            drifted.append(f"nccl.env not in the server's env ({', '.join(off)})")
    if drifted:
        out.append(
            finding(
                "drift",
                "warn",
                f"{service} differs from what gpuhost rendered and gated: " + "; ".join(drifted),
                "gpuhost check -i INV --fail-on-drift shows the diff against the inventory; "
                "gpuhost update (or provision) renders it again, gated",
            )
        )
    else:
        out.append(
            finding(
                "drift",
                "pass",
                f"unit and env as gpuhost rendered them (unit {_sha(unit)}, env keys "
                f"{len(live_env)}, nccl.env {'applied' if nccl_env is not None else 'absent'})",
            )
        )
    return out


GPU_CHECKS = ("xid", "remapped_rows", "ecc", "clocks", "power_limit", "pcie", "persistence",
              "versions", "processes")  # fmt: skip


def judge(cap, settings):
    """All findings from a collect() result. `settings`: service, cache_dir, disk_warn_gib,
    disk_fail_gib, xid_fail_codes."""
    service = settings.get("service", "sglang-server")
    out = []
    smi_rc, smi_out, smi_err = cap.get("nvsmi_xml") or (None, "", "nvidia-smi not run")
    gpus = None
    if smi_rc is None:
        out.append(
            finding(
                "gpu",
                "warn",
                f"no NVIDIA GPU visible ({smi_err.strip() or 'nvidia-smi not found'}): GPU "
                f"checks skipped ({', '.join(GPU_CHECKS)})",
                "on a GPU host install the driver (gpuhost provision); a sandbox has no GPU",
            )
        )
    elif smi_rc != 0:
        out.extend(
            check_versions(smi_rc, f"{smi_out}\n{smi_err}", None, cap.get("proc_version"), [])
        )
        if out[-1]["status"] == "pass":
            out[-1] = finding(
                "gpu",
                "fail",
                f"nvidia-smi -q -x exited {smi_rc}: {(smi_err or smi_out).strip()[:200]}",
                "look for Xid 79 (GPU fell off the bus) in the kernel log; reset or reboot",
            )
    else:
        try:
            parsed = parse_health_xml(smi_out)
            gpus = parsed["gpus"]
        except (ET.ParseError, IndexError, KeyError) as exc:
            out.append(finding("gpu", "fail", f"nvidia-smi -q -x not parsable: {exc}", ""))
        else:
            out.append(
                finding("gpu", "pass", f"{len(gpus)} GPU(s), driver {parsed['driver_version']}")
            )
    if gpus is not None:
        out.extend(
            check_xid(cap.get("kernel_log"), settings.get("xid_fail_codes", DEFAULT_XID_FAIL))
        )
        out.extend(check_memory_errors(gpus))
        out.extend(check_clocks(gpus))
        out.extend(check_power_limit(gpus))
        out.extend(check_pcie(gpus))
        out.extend(check_persistence(gpus))
        out.extend(
            check_versions(
                smi_rc, smi_err, parsed["driver_version"], cap.get("proc_version"),
                cap.get("nvml_libs"),
            )
        )  # fmt: skip
        out.extend(check_processes(gpus, set(cap.get("server_pids") or []), service))
    out.extend(check_server(cap.get("unit_state"), cap.get("journal"), service))
    out.extend(
        check_drift(
            cap.get("unit"), cap.get("unit_kept"), cap.get("env"), cap.get("env_kept"),
            cap.get("nccl_env"), service,
        )
    )  # fmt: skip
    free, total = cap.get("disk") or (None, None)
    where = settings.get("cache_dir", "?")
    if cap.get("disk_path") and cap["disk_path"] != where:
        where = f"{where} (not there yet; its file system at {cap['disk_path'] or '/'})"
    out.extend(
        check_disk(
            where, free, total,
            settings.get("disk_warn_gib", 50), settings.get("disk_fail_gib", 5),
        )
    )  # fmt: skip
    return out


# --------------------------------------------------------------------------------------
# collector (the only part that touches the host, through a Probe)

NVML_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                 "/usr/lib", "/usr/local/nvidia/lib64")  # fmt: skip


def collect(probe, params):
    """Read-only captures for judge(). `params`: nvidia_smi, service, unit_path, env_path,
    nccl_env_path, known_good_dir, cache_dir, journal_max_lines."""
    cap = {}
    cap["nvsmi_xml"] = probe.run([params["nvidia_smi"], "-q", "-x"])
    cap["proc_version"] = probe.read("/proc/driver/nvidia/version")
    libs = []
    for folder in NVML_LIB_DIRS:
        libs += [n for n in probe.listdir(folder) or [] if n.startswith("libnvidia-ml.so.")]
    cap["nvml_libs"] = sorted(set(libs))
    rc, out, _ = probe.run(["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso", "-q"])
    if rc != 0 or not out.strip():
        rc, out, _ = probe.run(["dmesg"])
    cap["kernel_log"] = out if rc == 0 else None

    service = params["service"]
    rc, out, _ = probe.run(
        ["systemctl", "show", f"{service}.service", "--timestamp=unix", "-p",
         "LoadState,ActiveState,SubState,Result,NRestarts,ExecMainStartTimestamp,ControlGroup"]
    )  # fmt: skip
    state = parse_systemctl_show(out) if rc == 0 else {}
    cap["unit_state"] = state
    cap["journal"] = None
    cap["server_pids"] = []
    if state.get("LoadState") == "loaded":
        since = state.get("ExecMainStartTimestamp") or ""
        argv = ["journalctl", "-u", f"{service}.service", "--no-pager", "-o", "short-iso", "-q"]
        argv += ["-n", str(params.get("journal_max_lines", 20000))]
        if since.startswith("@"):
            argv += ["--since", since]
        rc, out, _ = probe.run(argv)
        cap["journal"] = out if rc == 0 else None
        group = state.get("ControlGroup") or ""
        if group:
            procs = probe.read(f"/sys/fs/cgroup{group}/cgroup.procs") or ""
            cap["server_pids"] = [int(p) for p in procs.split() if p.isdigit()]
    cap["unit"] = probe.read(params["unit_path"])
    cap["unit_kept"] = probe.read(f"{params['known_good_dir']}/unit")
    cap["env"] = probe.read(params["env_path"])
    cap["env_kept"] = probe.read(f"{params['known_good_dir']}/env")
    cap["nccl_env"] = probe.read(params["nccl_env_path"])
    # A cache not created yet will live on its nearest existing parent's file system.
    cap["disk"], cap["disk_path"] = (None, None), params["cache_dir"]
    path = params["cache_dir"]
    while path:
        try:
            st = probe.statvfs(path)
        except OSError:
            parent = path.rsplit("/", 1)[0]
            path = parent if parent != path else ""
            continue
        cap["disk"], cap["disk_path"] = (st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize), path
        break
    return cap


SECRET_CAPTURES = ("env", "env_kept")


def public_captures(cap):
    """What may leave the host: no env file (it holds the API key), kernel log trimmed."""
    out = {k: v for k, v in cap.items() if k not in SECRET_CAPTURES}
    out["env_keys"] = sorted(parse_env(cap.get("env")))
    log = cap.get("kernel_log")
    out["kernel_log"] = None if log is None else [
        line for line in log.splitlines() if "NVRM" in line or "Xid" in line
    ][-50:]  # fmt: skip
    rc, text, err = cap.get("nvsmi_xml") or (None, "", "")
    out["nvsmi_xml"] = {"rc": rc, "stderr": (err or "")[-500:], "bytes": len(text or "")}
    return out
