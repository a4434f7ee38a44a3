# Copyright: gpuhost contributors
# Apache-2.0
"""GPU samples taken during a bench level, and which resource bounds that level.

The bench module (sglang_bench) runs `nvidia-smi dmon -s pucvmet -o T -d 1` beside each
bench_serving level and `nvidia-smi --query-gpu=<LIMITS_QUERY>` once; this file parses both,
summarises a level per GPU and names the bound resource with its evidence; with the level's
CPU side (gpuhost_cpu_samples) a latency or idle verdict becomes cpu_launch or interconnect
where the CPU side says so. Pure: text in, dicts out (tests/test_gpu_samples.py, over the
real H200 load capture in tests/fixtures/gpu-hosts/h200x1-day2/ and the reference
deployment's numbers; tests/test_cpu_samples.py, over a real H100 launch-bound capture).

dmon columns (nvidia-smi(1), `dmon -s`): p pwr W, gtemp/mtemp C; u sm % (time a kernel ran),
mem % (time device memory was read or written: NVML's memory utilisation, the usual
"memory bandwidth" reading); c mclk/pclk MHz; v pviol % (time clocks were held down by the
power limit), tviol (thermal violation); t rxpci/txpci MB/s. `sm` is not SM *activity*: a
copy engine alone keeps it at 100% (the PCIe phase of the capture shows it); SM activity
needs GPM (NVML) or DCGM's DCGM_FI_PROF_SM_ACTIVE.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_cpu_samples import (
    cpu_bound,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_cpu_samples import (
    evidence as cpu_evidence,
)

LIMITS_QUERY = "index,power.limit,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max"
STANDIN_MARK = "STAND-IN"
COLUMNS = ("pwr", "gtemp", "sm", "mem", "pclk", "mclk", "pviol", "tviol", "rxpci", "txpci")
# PCIe payload bandwidth per lane and direction, GB/s (128b/130b from Gen3 on).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

# Thresholds of explain(): a level is bound by a resource once its share is at least this.
POWER_BOUND = 0.90  # of the power limit, or pviol above PVIOL_BOUND
PVIOL_BOUND = 50.0
MEM_BOUND = 80.0
PCIE_BOUND = 0.70  # of the link's per-direction bandwidth
BUSY = 50.0  # sm% below this: the GPU waits for work


def _num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def parse_dmon(text):
    """`nvidia-smi dmon ... -o T` -> {standin, samples: [{time, gpu, pwr, sm, ...}]}.

    Columns are found by the header line, so any -s selection parses; '-' (not available)
    becomes None.
    """
    header = None
    samples = []
    standin = False
    for line in (text or "").splitlines():
        if STANDIN_MARK in line:
            standin = True
        if line.startswith("#"):
            names = line.lstrip("#").split()
            if "gpu" in names and header is None:
                header = names
            continue
        fields = line.split()
        if not header or len(fields) != len(header):
            continue
        row = dict(zip(header, fields, strict=True))
        sample = {"time": row.get("Time"), "gpu": int(_num(row["gpu"]) or 0)}
        for col in COLUMNS:
            sample[col] = _num(row.get(col))
        samples.append(sample)
    return {"standin": standin, "samples": samples}


def parse_limits(text):
    """--query-gpu=LIMITS_QUERY --format=csv,noheader,nounits -> {gpu: {...}}."""
    out = {}
    for line in (text or "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        out[int(fields[0])] = {
            "power_limit_w": _num(fields[1]),
            "sm_clock_max_mhz": _num(fields[2]),
            "pcie_gen_max": int(_num(fields[3]) or 0) or None,
            "pcie_width_max": int(_num(fields[4]) or 0) or None,
        }
    return out


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summarize(samples, limits):
    """Per GPU means over the level. Samples at the very start (ramp) are kept: a level is
    seconds to minutes long, one second of ramp moves a mean little."""
    by_gpu = {}
    for sample in samples:
        by_gpu.setdefault(sample["gpu"], []).append(sample)
    out = []
    for gpu, rows in sorted(by_gpu.items()):
        lim = (limits or {}).get(gpu) or {}
        entry = {"gpu": gpu, "n": len(rows)}
        for col in COLUMNS:
            entry[col] = _mean(r[col] for r in rows)
        limit = lim.get("power_limit_w")
        entry["power_limit_w"] = limit
        entry["power_share"] = entry["pwr"] / limit if entry["pwr"] is not None and limit else None
        clock_max = lim.get("sm_clock_max_mhz")
        entry["sm_clock_share"] = (
            entry["pclk"] / clock_max if entry["pclk"] is not None and clock_max else None
        )
        gen, width = lim.get("pcie_gen_max"), lim.get("pcie_width_max")
        link = PCIE_LANE_GBS.get(gen, 0) * width if gen and width else None
        entry["pcie_link_gbs"] = link
        busiest = max(entry["rxpci"] or 0.0, entry["txpci"] or 0.0) / 1000.0
        entry["pcie_gbs"] = ((entry["rxpci"] or 0.0) + (entry["txpci"] or 0.0)) / 1000.0
        entry["pcie_share"] = busiest / link if link else None
        out.append(entry)
    return out


def _pct(share):
    return "?" if share is None else f"{share * 100:.0f}%"


def evidence(entry):
    parts = [f"GPU{entry['gpu']}: busy (sm) {entry['sm']:.0f}%" if entry["sm"] is not None else ""]
    if entry.get("power_share") is not None:
        parts.append(
            f"power {entry['pwr']:.0f} W = {_pct(entry['power_share'])} of the "
            f"{entry['power_limit_w']:.0f} W limit"
        )
    elif entry.get("pwr") is not None:
        parts.append(f"power {entry['pwr']:.0f} W (limit unknown)")
    if entry.get("pviol"):
        parts.append(f"power-capped {entry['pviol']:.0f}% of the time")
    if entry.get("mem") is not None:
        parts.append(f"memory bandwidth {entry['mem']:.0f}%")
    if entry.get("rxpci") is not None:
        link = entry.get("pcie_link_gbs")
        parts.append(
            f"PCIe {entry['pcie_gbs']:.1f} GB/s"
            + (f" ({_pct(entry['pcie_share'])} of {link:.0f} GB/s per direction)" if link else "")
        )
    if entry.get("sm_clock_share") is not None:
        parts.append(f"SM clock {entry['pclk']:.0f} MHz = {_pct(entry['sm_clock_share'])} of max")
    if entry.get("tviol"):
        parts.append("thermal violation")
    return ", ".join(p for p in parts if p)


ADVICE = {
    "thermal": "the GPU slows down to cool: fix the cooling before tuning anything else",
    "power": "at the power limit: more throughput needs more power (limit at the board default? "
    "nvidia-smi -pl) or less work per token (quantisation, speculative decoding)",
    "memory_bandwidth": "HBM-bound, as decode usually is: fewer bytes per token help "
    "(FP8/FP4 weights and KV cache, larger batches share each weight read)",
    "pcie": "PCIe carries the load: look for host<->device copies (CPU offload, swapped KV "
    "cache) or all-reduce over PCIe without P2P; keep data on the GPU",
    "compute": "compute-bound at high power: the GPU is used well; more needs more GPUs",
    "idle": "the GPU waits for work: the bound is outside it (the client, the scheduler on the "
    "CPU, too few concurrent requests); raise concurrency or check the CPU",
    "latency": "not bandwidth- or power-bound: the GPU is busy but its SMs wait - small kernels, "
    "launch gaps and synchronisation; check the all-reduce path (custom all-reduce, P2P, "
    "NCCL's transport) and the MoE kernels, and profile one step (nsys) to see which",
    "cpu_launch": "the GPU waits on the CPU: the thread that launches its kernels (SGLang's "
    "scheduler) has no headroom, or the guest's CPUs are taken (steal, a long run queue). Pin "
    "the VM's vCPUs to cores of the GPUs' NUMA node and keep them to the VM (docs/slow-vm.md), "
    "find what steals them (a busy neighbour, an overcommitted node), keep CUDA graphs on and "
    "large enough for the batch (--cuda-graph-max-bs), and look for a fixed CPU cost per "
    "forward pass (a spin or a sync per step)",
    "interconnect": "the GPU waits on the other GPUs: several GPUs, none power- or "
    "bandwidth-bound, and no CPU thread saturated - the all-reduce path sets the pace. Check "
    "P2P between the GPUs (gpuhost_gpu's p2p, `nvidia-smi topo -m`), ACS on their root ports, "
    "the links' speed under load, and NCCL's transport (NCCL_DEBUG=INFO; NCCL_P2P_LEVEL, "
    "custom all-reduce)",
}


def explain(summary, cpu=None):
    """Which resource bounds this level, per the busiest GPU, with the evidence.

    Returns {bound, gpu, evidence, advice}; bound is one of thermal, power,
    memory_bandwidth, pcie, compute, idle, latency, or unknown when nothing was sampled.
    With `cpu` (gpuhost_cpu_samples.summarize of the level), a GPU that is neither saturated
    nor busy (latency, idle) is split further: cpu_launch when the CPU side has no headroom
    (cpu_bound), else interconnect when several GPUs share the work; the CPU numbers join
    the evidence either way.
    """
    if not summary:
        return {"bound": "unknown", "gpu": None, "evidence": "no GPU samples", "advice": ""}
    entry = max(summary, key=lambda e: (e.get("sm") or 0.0, e.get("pwr") or 0.0))
    for e in summary:  # a throttled GPU holds the others back: it decides
        if e.get("tviol") or (e.get("pviol") or 0) >= PVIOL_BOUND:
            entry = e
            break
    sm = entry.get("sm") or 0.0
    power = entry.get("power_share")
    if entry.get("tviol"):
        bound = "thermal"
    elif (entry.get("pviol") or 0) >= PVIOL_BOUND or (power is not None and power >= POWER_BOUND):
        bound = "power"
    elif (entry.get("mem") or 0) >= MEM_BOUND:
        bound = "memory_bandwidth"
    elif (entry.get("pcie_share") or 0) >= PCIE_BOUND:
        bound = "pcie"
    elif sm < BUSY:
        bound = "idle"
    elif power is not None and power >= 0.75:
        bound = "compute"
    else:
        bound = "latency"
    text = evidence(entry)
    if cpu:
        if bound in ("latency", "idle") and cpu_bound(cpu):
            bound = "cpu_launch"
        elif bound == "latency" and len(summary) > 1:
            bound = "interconnect"
            text += f"; {len(summary)} GPUs in step, no CPU thread saturated"
        text += "; CPU: " + cpu_evidence(cpu)
    return {"bound": bound, "gpu": entry["gpu"], "evidence": text, "advice": ADVICE[bound]}


def compact(samples):
    """Samples as rows under one header (a level of minutes is hundreds of samples)."""
    header = ["time", "gpu", *COLUMNS]
    return {"columns": header, "rows": [[s.get(c) for c in header] for s in samples]}
