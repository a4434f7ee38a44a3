# Copyright: gpuhost contributors
# Apache-2.0
"""How the Proxmox node runs its cores and routes GPU peer traffic (issue 32), role
proxmox_host: the CPU frequency governor, the enabled C-states, and ACS on the PCIe bridges
between the mapped GPUs. Pure: the sectioned report the role's "node tuning" block prints
(format: tests/fixtures/proxmox-node/SOURCE.md) and the VM's spec in, findings
`proxmox_host.cpu_governor`, `proxmox_host.cstates`, `proxmox_host.acs` out. Unit-tested in
tests/test_node_tuning.py; explained in docs/slow-vm.md "Checks, node and guest".

None of them fails: each costs speed, not correctness, so a rebuild goes on (the gate of
playbooks/rebuild.yml stops on `fail` only). A check whose input could not be read passes
with "not checked: <why>" (a node whose firmware owns the clocks has no cpufreq at all).
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import combinations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_proxmox_host import sections

PREFIX = "proxmox_host."
CHECKS = ("cpu_governor", "cstates", "acs")
# Idle states that wake in more than this many microseconds are "deep": C1 and C1E wake in
# 1-10 us; the core and package power-down states (Intel C6, AMD's ACPI C2) take ~100 us+.
DEEP_LATENCY_US = 10
# ACS controls that send peer-to-peer requests or completions up to the root complex (the
# kernel's pci_bridge_has_acs_redir tests the same three bits, drivers/pci/p2pdma.c).
REDIRECT = ("ReqRedir", "CmpltRedir", "EgressCtrl")
_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_CPU_FILE = re.compile(r"/cpu(\d+)/cpufreq/scaling_governor:(\S+)")
_IDLE_FILE = re.compile(r"/cpu(\d+)/cpuidle/state(\d+)/(name|latency|disable):(.*)$")

finding = prefixed(PREFIX)


def parse_report(text):
    """{governors: {cpu: governor}, cpufreq_driver, cpuidle_driver, idle: {cpu: {state:
    {name, latency, disable}}}, upstream: {gpu: [bridges]}, acs: {bridge: flags or None}}.
    acs flags: {"ReqRedir": True, ...} from the ACSCtl line; None when lspci printed
    "<access denied>" or is missing; {} when the bridge has no ACS capability."""
    parts = sections(text)

    def first(key):
        return next((x.strip() for x in parts.get((key, None), []) if x.strip()), "")

    out = {
        "governors": {},
        "cpufreq_driver": first("cpufreq_driver"),
        "cpuidle_driver": first("cpuidle_driver"),
        "idle": {},
        "upstream": {},
        "acs": {},
    }
    for line in parts.get(("governor", None), []):
        match = _CPU_FILE.search(line)
        if match:
            out["governors"][int(match.group(1))] = match.group(2)
    for line in parts.get(("cpuidle", None), []):
        match = _IDLE_FILE.search(line.strip())
        if match:
            cpu, state, key, value = match.groups()
            entry = out["idle"].setdefault(int(cpu), {}).setdefault(int(state), {})
            entry[key] = int(value) if key != "name" and value.strip().isdigit() else value.strip()
    for (name, arg), lines in parts.items():
        if name == "upstream" and arg:
            chain = [c for line in lines for c in line.strip().split("/") if _BDF.fullmatch(c)]
            out["upstream"][arg.lower()] = chain[:-1] if chain else []
        elif name == "acs" and arg:
            out["acs"][arg.lower()] = _acs_flags(lines)
    return out


def _acs_flags(lines):
    text = "\n".join(lines)
    match = re.search(r"ACSCtl:\s*(.*)", text)
    if match:
        return {m.group(1): m.group(2) == "+" for m in re.finditer(r"(\w+)([+-])", match.group(1))}
    if "access denied" in text or "lspci: not found" in text:
        return None
    return {}


def tuning_findings(report, spec):
    """spec: {gpus: [mapping ids], gpu_clique: bool}. The three findings, in CHECKS order;
    acs only when GPUs are mapped."""
    facts = parse_report(report)
    out = [_governor(facts), _cstates(facts)]
    if spec.get("gpus"):
        out.append(_acs(facts, bool(spec.get("gpu_clique"))))
    return out


def _governor(facts):
    governors = facts["governors"]
    driver = f" ({facts['cpufreq_driver']})" if facts["cpufreq_driver"] else ""
    if not governors:
        return finding(
            "cpu_governor",
            "pass",
            "not checked: no /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor (no cpufreq "
            "driver), so the firmware sets the clocks; make sure its power profile is the "
            "performance one",
        )
    counts = Counter(governors.values())
    other = {g: n for g, n in counts.items() if g != "performance"}
    if not other:
        return finding(
            "cpu_governor", "pass", f"governor performance on all {len(governors)} CPUs{driver}"
        )
    listed = ", ".join(f"{g} on {n}" for g, n in sorted(other.items()))
    return finding(
        "cpu_governor",
        "warn",
        f"CPU frequency governor {listed} of {len(governors)} CPUs{driver}, not performance: "
        "cores idle at low clocks and ramp up only under sustained load, so the short CPU work "
        "between GPU kernels (scheduling, launches) runs slower",
        "Set it now: cpupower frequency-set -g performance (package linux-cpupower); keep it "
        "with a systemd oneshot that runs the same at boot, or cpufreq.default_governor="
        "performance on the kernel command line (/etc/kernel/cmdline or "
        "GRUB_CMDLINE_LINUX_DEFAULT, proxmox-boot-tool refresh, reboot); docs/slow-vm.md.",
    )


def _cstates(facts):
    idle, driver = facts["idle"], facts["cpuidle_driver"]
    if not idle:
        if driver == "none":
            return finding(
                "cstates", "pass", "no cpuidle driver (none): cores idle in HLT, no deep C-states"
            )
        return finding(
            "cstates",
            "pass",
            "not checked: no /sys/devices/system/cpu/cpu*/cpuidle states to read",
        )
    names = idle.get(min(idle), {})
    deep = Counter()
    for states in idle.values():
        for number, state in states.items():
            latency = state.get("latency", names.get(number, {}).get("latency"))
            name = state.get("name", names.get(number, {}).get("name", f"state{number}"))
            if isinstance(latency, int) and latency > DEEP_LATENCY_US and state.get("disable") == 0:
                deep[f"{name} ({latency} us)"] += 1
    where = f" ({driver})" if driver else ""
    if not deep:
        return finding(
            "cstates",
            "pass",
            f"no idle state deeper than {DEEP_LATENCY_US} us enabled on {len(idle)} CPUs{where}",
        )
    listed = ", ".join(f"{s} on {n}" for s, n in sorted(deep.items()))
    return finding(
        "cstates",
        "warn",
        f"deep C-states enabled{where}: {listed} of {len(idle)} CPUs: an idle core that a vCPU "
        "wakes (an interrupt, a kernel launch after a wait) first spends that long coming back",
        f"Disable them now: cpupower idle-set -D {DEEP_LATENCY_US + 1} (every state that takes "
        f"{DEEP_LATENCY_US + 1} us or more); at boot intel_idle.max_cstate=1 (Intel) or "
        "processor.max_cstate=1 (acpi_idle, AMD) on the kernel command line, proxmox-boot-tool "
        "refresh, reboot; or the firmware's C-state setting. It costs idle power; docs/slow-vm.md.",
    )


def _between(upstream):
    """The bridges on the path between each pair of GPUs: below their common ancestor."""
    found = []
    for a, b in combinations(sorted(upstream), 2):
        ca, cb = upstream[a], upstream[b]
        common = 0
        while common < min(len(ca), len(cb)) and ca[common] == cb[common]:
            common += 1
        for bridge in ca[common:] + cb[common:]:
            if bridge not in found:
                found.append(bridge)
    return found


def _acs(facts, clique):
    upstream = {g: c for g, c in facts["upstream"].items() if c}
    if not facts["upstream"]:
        return finding("acs", "pass", "not checked: no mapped GPU's PCI path was read")
    if len(facts["upstream"]) < 2:
        return finding("acs", "pass", "one GPU: no GPU-to-GPU traffic for ACS to redirect")
    if len(upstream) < len(facts["upstream"]):
        return finding("acs", "pass", "not checked: the GPUs' upstream bridges were not read")
    bridges = _between(upstream)
    unread = [b for b in bridges if facts["acs"].get(b) is None]
    if unread:
        return finding(
            "acs",
            "pass",
            f"not checked: ACS control of {', '.join(unread)} not readable (lspci missing, or "
            "not run as root)",
        )
    redirecting = {
        b: [f for f in REDIRECT if facts["acs"][b].get(f)]
        for b in bridges
        if any(facts["acs"][b].get(f) for f in REDIRECT)
    }
    if not redirecting:
        return finding(
            "acs",
            "pass",
            f"no ACS redirect on the {len(bridges)} bridge(s) between the GPUs: peer traffic "
            "turns at the switch or root complex",
        )
    listed = "; ".join(f"{b} {'+ '.join(f)}+" for b, f in redirecting.items())
    if not clique:
        return finding(
            "acs",
            "pass",
            f"ACS redirects GPU peer traffic to the root complex at {listed}: it keeps each GPU "
            "in its own IOMMU group and costs nothing while the VM has no P2P (no GPU clique: "
            "NCCL goes through host memory)",
        )
    return finding(
        "acs",
        "warn",
        f"ACS redirects GPU peer traffic to the root complex at {listed}, and the VM asks for "
        "P2P (proxmox_vm_gpu_clique): every P2P transfer detours through the IOMMU, slower, "
        "and NCCL can hang there (NVIDIA/nccl#2079)",
        "Measure first (nccl role, all_reduce_perf). Then either turn the clique off and let "
        "NCCL use host memory, or clear the redirect bits on those bridges at each boot "
        "(setpci -s <bridge> ECAP_ACS+0x6.w=0000, or the firmware's ACS setting), knowing that "
        "the IOMMU groups behind them merge and must go to this one VM; docs/slow-vm.md.",
    )
