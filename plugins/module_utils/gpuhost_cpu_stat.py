# CPU time and NUMA as the host sees it (a VM guest or bare metal): the steal column of
# /proc/stat sampled twice, and the CPUs of each NUMA node. gpu_facts puts them in
# gpuhost_host.steal and gpuhost_host.numa_cpus (docs/facts.md); the preflight checks
# preflight.steal_time and preflight.numa read them (plugins/plugin_utils/gpuhost_guest_checks.py).
#
# Sources:
#   /proc/stat (proc(5)): "cpu" and "cpuN" lines of USER_HZ ticks: user nice system idle
#       iowait irq softirq steal guest guest_nice. guest and guest_nice are already counted
#       in user and nice, so a CPU's total time is the sum of the first eight.
#   /sys/devices/system/node/node<N>/cpulist (Documentation/ABI/stable/sysfs-devices-node):
#       "0-15,32-47"; empty for a node with memory and no CPUs.
# Everything touches the machine through a Probe (gpuhost_hostfacts), so tests substitute files.

from __future__ import annotations

import re
import time

UNKNOWN = "unknown"
_CPU_LINE = re.compile(r"^(cpu\d*)\s+(\d+(?:\s+\d+)*)\s*$")
_STEAL = 7  # index of steal among the columns


def parse_proc_stat(text):
    """{'cpu': [ticks...], 'cpu0': [...], ...}: the columns of each cpu line as ints."""
    out = {}
    for line in (text or "").splitlines():
        match = _CPU_LINE.match(line.strip())
        if match:
            out[match.group(1)] = [int(x) for x in match.group(2).split()]
    return out


def _share(before, after):
    """Steal percent of one cpu line between two reads; None without a steal column."""
    if len(before) <= _STEAL or len(after) <= _STEAL:
        return None
    total = sum(after[: _STEAL + 1]) - sum(before[: _STEAL + 1])
    if total <= 0:
        return 0.0
    return round(100.0 * (after[_STEAL] - before[_STEAL]) / total, 1)


def steal_between(before, after):
    """{percent, worst_cpu, worst_cpu_percent} from two parse_proc_stat() reads, or None when
    the kernel prints no steal column (or the reads have no aggregate cpu line)."""
    if "cpu" not in before or "cpu" not in after:
        return None
    percent = _share(before["cpu"], after["cpu"])
    if percent is None:
        return None
    worst, worst_pct = "", 0.0
    for name in sorted(after, key=lambda n: (len(n), n)):
        if name == "cpu" or name not in before:
            continue
        pct = _share(before[name], after[name])
        if pct is not None and (not worst or pct > worst_pct):
            worst, worst_pct = name, pct
    return {"percent": percent, "worst_cpu": worst, "worst_cpu_percent": worst_pct}


def parse_cpulist(text):
    """'0-3,8,10-11' -> 7 (the CPU count); '' -> 0; None for text that is not a cpulist."""
    text = (text or "").strip()
    if not text:
        return 0
    count = 0
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            return None
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        count += max(0, high - low + 1)
    return count


def collect_numa_cpus(probe):
    """[{node, cpus, count}] per /sys/devices/system/node/node<N>, and the unknown reasons."""
    names = probe.listdir("/sys/devices/system/node")
    if names is None:
        return UNKNOWN, {"numa_cpus": "/sys/devices/system/node not readable"}
    nodes, unknown = [], {}
    for name in names:
        match = re.fullmatch(r"node(\d+)", name)
        if not match:
            continue
        text = probe.read(f"/sys/devices/system/node/{name}/cpulist")
        count = parse_cpulist(text)
        if text is None or count is None:
            unknown[f"numa_cpus.{len(nodes)}"] = (
                f"/sys/devices/system/node/{name}/cpulist not readable"
            )
            count = UNKNOWN
        nodes.append({"node": int(match.group(1)), "cpus": (text or "").strip(), "count": count})
    nodes.sort(key=lambda n: n["node"])
    return nodes, unknown


def collect_steal(probe, sample_s, sleep=time.sleep):
    """Steal time over sample_s seconds (/proc/stat read, sleep, read again), or since boot
    when sample_s is 0 (one read: the counters start at zero at boot, and nothing waits)."""
    steal = {"percent": UNKNOWN, "worst_cpu": "", "worst_cpu_percent": UNKNOWN}
    steal["interval_s"] = sample_s
    if sample_s > 0:
        before = parse_proc_stat(probe.read("/proc/stat"))
        sleep(sample_s)
    after = parse_proc_stat(probe.read("/proc/stat"))
    if sample_s <= 0:
        before = {name: [0] * len(ticks) for name, ticks in after.items()}
    found = steal_between(before, after)
    if found is None:
        reason = "/proc/stat not readable" if not after else "/proc/stat has no steal column"
        return steal, {"steal.percent": reason}
    steal.update(found)
    return steal, {}


def collect_cpu(probe, sample_s=0.0, sleep=time.sleep):
    """The gpuhost_host keys numa_cpus and steal (docs/facts.md), and their unknown reasons."""
    numa, unknown = collect_numa_cpus(probe)
    steal, steal_unknown = collect_steal(probe, sample_s, sleep)
    unknown.update(steal_unknown)
    return {"numa_cpus": numa, "steal": steal}, unknown
