# Copyright: gpuhost contributors
# Apache-2.0
"""Does a serving profile fit the measured GPUs? `sglang_server_profile: auto` and the
model-fit check of preflight.

Pure: dicts in, dicts out. The action plugin gpuhost_sglang_profile feeds it the profile
files, the gpuhost_gpu fact (docs/facts.md) and, when known, the weights' size read from the
hub or the pre-staged path; tests/test_profile_fit.py feeds it dicts.

A profile says what it needs:

    requires: {gpus: 8, gpu_memory_gib: 94, sm: [120]}   # count, per-GPU memory, archs
    weights_gib: 457          # its weights, when nothing better is known
    kv_cache_min_gib: 12      # KV-cache room it needs on each GPU of the TP group
    auto_order: 10            # its place in `auto`'s list (absent: never picked by auto)
    nodes: 2                  # hosts it spans (a serving group; default 1): requires.gpus is
                              # per node, TP x PP is split over the nodes

The memory model is SGLang's: each GPU's static pool is memory x --mem-fraction-static; the
weights are sharded over TP x PP GPUs; what is left of the pool on each GPU is the KV cache
(sglang's model_runner profiles exactly this at start-up). Activations, CUDA graphs and the
NCCL buffers live in the rest (1 - fraction). Across the nodes of a serving group the TP x PP
GPUs are the group's: the weights are sharded over all of them, so they and the KV cache fit
against the group's total pool; every node is taken to have this host's GPUs (preflight
checks that the nodes match: gpuhost_serving_group.consistency).
"""

from __future__ import annotations

import re

GIB = 1 << 30
# What SGLang's own choice of --mem-fraction-static comes to on large GPUs when a profile
# sets none; the message says when this assumption was used.
ASSUMED_MEM_FRACTION = 0.85


def _sm(capability):
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(capability))
    return int(match.group(1)) * 10 + int(match.group(2)) if match else None


# Before the driver is loaded (a bare host: preflight runs before role nvidia_driver) only the
# PCI ids are known. For the GPUs of the recorded hosts the id says what nvidia-smi reports
# once the driver is up (tests/fixtures/gpu-hosts/: name, compute capability, memory MiB).
# The two RTX PRO 6000 Workstation cards (ids from the PCI ID repository,
# https://pci-ids.ucw.cz/read/PC/10de, and the supported-chips appendix of NVIDIA's Linux
# driver README) are the same GB202 chip with 96 GB GDDR7 as the Server Edition: nvidia-smi
# reports the same 97887 MiB and compute capability 12.0 for them; no recorded host has one.
PCI_GPUS = {
    "10de:2330": ("NVIDIA H100 80GB HBM3", "9.0", 81559),
    "10de:2335": ("NVIDIA H200", "9.0", 143771),
    "10de:26b9": ("NVIDIA L40S", "8.9", 46068),
    "10de:2bb1": ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 97887),
    "10de:2bb4": ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0", 97887),
    "10de:2bb5": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887),
}


def unknown_pci_ids(gpu):
    """The PCI ids (vendor:device, sorted) of a driverless host's GPUs that PCI_GPUS lacks."""
    if not isinstance(gpu, dict) or (gpu.get("driver") or {}).get("loaded"):
        return []
    devices = [d for d in gpu.get("pci_devices") or [] if isinstance(d, dict)]
    ids = {str(d.get("device_id", "")).lower() or "?" for d in devices}
    return sorted(i for i in ids if i not in PCI_GPUS)


def _from_pci(gpu):
    devices = [d for d in gpu.get("pci_devices") or [] if isinstance(d, dict)]
    known = [PCI_GPUS.get(str(d.get("device_id", "")).lower()) for d in devices]
    if not devices or not all(known):
        return None
    return {
        "count": len(known),
        "memory_gib": round(min(k[2] for k in known) / 1024, 1),
        "sms": sorted({_sm(k[1]) for k in known}),
        "names": sorted({k[0] for k in known}),
        "from": "pci",
    }


def measured(gpu):
    """What the gpuhost_gpu fact says about the GPUs, or None when nothing was measured.

    {count, memory_gib (the smallest GPU's), sms (sorted), names (sorted), from: nvidia-smi |
    pci}. Without a loaded driver, the PCI ids of known GPUs (PCI_GPUS) stand in.
    """
    if not isinstance(gpu, dict):
        return None
    if not (gpu.get("driver") or {}).get("loaded"):
        return _from_pci(gpu)
    gpus = [g for g in gpu.get("gpus") or [] if isinstance(g, dict)]
    count = gpu.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1 or not gpus:
        return None
    mem = [g.get("memory_total_mib") for g in gpus]
    mem = [m for m in mem if isinstance(m, (int, float)) and not isinstance(m, bool)]
    return {
        "count": count,
        "memory_gib": round(min(mem) / 1024, 1) if mem else None,
        "sms": sorted({s for s in (_sm(g.get("compute_capability")) for g in gpus) if s}),
        "names": sorted({str(g.get("name", "?")) for g in gpus}),
        "from": "nvidia-smi",
    }


def _num(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def doc_problems(name, doc):
    """Shape errors in a profile's fit keys (a list of lines naming key, value, allowed)."""
    problems = []
    req = doc.get("requires")
    if req is not None and not isinstance(req, dict):
        return [f"profile {name}: requires: got {req!r}; allowed: a mapping (gpus, ...)"]
    req = req or {}
    for key, minimum in (("gpus", 1), ("gpu_memory_gib", 1)):
        value = req.get(key)
        if value is not None and (_num(value) is None or _num(value) < minimum):
            problems.append(
                f"profile {name}: requires.{key}: got {value!r}; allowed: a number >= {minimum}"
            )
    sms = req.get("sm")
    if sms is not None and (
        not isinstance(sms, list) or not all(isinstance(s, int) and s >= 70 for s in sms)
    ):
        problems.append(
            f"profile {name}: requires.sm: got {sms!r}; allowed: a list of SM numbers such as "
            "[90, 100] (compute capability x 10)"
        )
    for key in ("weights_gib", "kv_cache_min_gib"):
        value = doc.get(key)
        if value is not None and (_num(value) is None or _num(value) < 0):
            problems.append(f"profile {name}: {key}: got {value!r}; allowed: a number >= 0")
    order = doc.get("auto_order")
    if order is not None and (not isinstance(order, int) or isinstance(order, bool)):
        problems.append(f"profile {name}: auto_order: got {order!r}; allowed: an integer")
    nodes = doc.get("nodes")
    if nodes is not None and (not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1):
        problems.append(
            f"profile {name}: nodes: got {nodes!r}; allowed: an integer >= 1 (the hosts of a "
            "serving group it spans; 1, the default, for a host alone)"
        )
    return problems


def _int(value, default):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _hosts(nodes):
    return "this host serves alone" if nodes == 1 else f"the serving group has {nodes} hosts"


def fit(profile, gpus, weights=None, nodes=1):
    """Can this host (with its group) serve this profile? Returns a dict:

    ok: bool; reasons: lines saying why not (empty when ok); numbers: what was computed;
    lines: the computation in words (for the finding).

    profile: an effective profile (gpuhost_profile.resolve) or a profile file's mapping:
      tp_size, flags (--pp-size, --mem-fraction-static), requires, weights_gib,
      kv_cache_min_gib.
    gpus: measured(gpu fact).
    weights: {"bytes": n, "source": "..."} measured elsewhere (hub, pre-staged path); else
      the profile's weights_gib, else the weights are not checked (and the lines say so).
    nodes: the hosts the server spans (its serving group's size, 1 alone). A profile whose
      `nodes` differs does not fit; `requires.gpus` and TP x PP / nodes are per host.
    """
    reasons, lines = [], []
    req = profile.get("requires") or {}
    flags = profile.get("flags") or {}
    tp = _int(profile.get("tp_size"), 1) or 1
    pp = _int(flags.get("--pp-size") or flags.get("--pipeline-parallel-size"), 1) or 1
    span = tp * pp
    nodes = max(_int(nodes, 1) or 1, 1)
    per_node = -(-span // nodes)
    need_count = max(_int(req.get("gpus"), 0) or 0, per_node)
    numbers = {"gpus_needed": need_count, "tp_size": tp, "pp_size": pp, "nodes": nodes}
    sized = profile.get("nodes")
    if sized is not None and sized != nodes:
        # Its TP and memory are split over another number of hosts: nothing else to judge.
        return {
            "ok": False,
            "reasons": [f"sized for {sized} host(s) (nodes: {sized}), {_hosts(nodes)}"],
            "numbers": numbers,
            "lines": [],
        }
    if gpus is None:
        return {
            "ok": False,
            "reasons": ["no GPU measured (no driver loaded, or nvidia-smi found none)"],
            "numbers": numbers,
            "lines": [],
        }
    count, mem, sms = gpus["count"], gpus["memory_gib"], gpus["sms"]
    numbers.update(count=count, gpu_memory_gib=mem, sms=sms)
    if count < need_count and nodes > 1:
        reasons.append(
            f"needs {need_count} GPU(s) per host (TP {tp} x PP {pp} over {nodes} hosts), this "
            f"host has {count}"
        )
    elif count < need_count:
        reasons.append(f"needs {need_count} GPU(s) (TP {tp} x PP {pp}), this host has {count}")
    want_mem = _num(req.get("gpu_memory_gib"))
    if want_mem and mem is not None and mem < want_mem:
        reasons.append(f"needs >= {want_mem:g} GiB per GPU, this host's have {mem:g} GiB")
    want_sm = req.get("sm") or []
    if want_sm and sms and not set(sms) <= set(want_sm):
        reasons.append(
            f"built for SM{'/SM'.join(map(str, want_sm))}, this host's GPUs are "
            f"SM{'/SM'.join(map(str, sms))} ({', '.join(gpus['names'])})"
        )

    fraction = _num(flags.get("--mem-fraction-static"))
    assumed = fraction is None
    fraction = ASSUMED_MEM_FRACTION if assumed else fraction
    numbers["mem_fraction_static"] = fraction
    if weights and _num(weights.get("bytes")):
        weights_gib = _num(weights["bytes"]) / GIB
        source = str(weights.get("source") or "measured")
    elif _num(profile.get("weights_gib")):
        weights_gib = float(_num(profile["weights_gib"]))
        source = "the profile's weights_gib"
    else:
        weights_gib, source = None, ""
    if mem is None:
        lines.append("GPU memory not reported: weights and KV room not checked")
    elif weights_gib is None:
        lines.append("weights' size unknown (no weights_gib, hub or pre-staged size): not checked")
    else:
        pool = mem * fraction
        per_gpu = weights_gib / span
        room = pool - per_gpu
        kv_min = float(_num(profile.get("kv_cache_min_gib")) or 0)
        numbers.update(
            weights_gib=round(weights_gib, 1),
            weights_source=source,
            weights_per_gpu_gib=round(per_gpu, 1),
            pool_per_gpu_gib=round(pool, 1),
            kv_room_per_gpu_gib=round(room, 1),
            kv_cache_min_gib=kv_min,
            group_pool_gib=round(pool * span, 1),
        )
        frac_text = f"--mem-fraction-static {fraction:g}" + (
            " (assumed: the profile sets none)" if assumed else ""
        )
        group_text = (
            f" ({span} GPUs over {nodes} hosts: the group's pool {pool * span:.1f} GiB)"
            if nodes > 1
            else ""
        )
        sum_text = (
            f"weights {weights_gib:.1f} GiB ({source}) / {span} GPU(s) = {per_gpu:.1f} GiB per "
            f"GPU; pool {mem:g} GiB x {frac_text} = {pool:.1f} GiB per GPU{group_text}"
        )
        lines.append(f"{sum_text}; KV-cache room {room:.1f} GiB per GPU (needs {kv_min:g})")
        if per_gpu >= pool:
            reasons.append(
                f"weights do not fit: {sum_text}; the weights alone are {per_gpu - pool:.1f} GiB "
                "over the pool"
            )
        elif room < kv_min:
            reasons.append(
                f"no room for the KV cache: {sum_text}; {room:.1f} GiB left per GPU, the profile "
                f"needs kv_cache_min_gib {kv_min:g}"
            )
    return {"ok": not reasons, "reasons": reasons, "numbers": numbers, "lines": lines}


def _gib(value):
    return "?" if value is None else f"{value:g}"


def auto_order(profiles):
    """[(name, doc)] in `auto`'s order: auto_order ascending, then name; profiles without
    auto_order are left out (they are only used when named)."""
    ranked = [
        (doc.get("auto_order"), name, doc)
        for name, doc in profiles
        if isinstance(doc, dict) and isinstance(doc.get("auto_order"), int)
    ]
    return [(name, doc) for _order, name, doc in sorted(ranked, key=lambda r: (r[0], r[1]))]


def _group(nodes):
    return f"a serving group of {nodes} hosts, each with " if nodes > 1 else ""


def select(profiles, gpu, nodes=1):
    """Pick the first profile in auto_order(profiles) that fits the gpuhost_gpu fact and the
    number of hosts the server spans (`nodes`: its serving group's size, 1 alone): a profile
    sized for other `nodes` is never picked (fit says why).

    Returns {"selected": name or None, "considered": [{name, ok, reasons, lines}],
    "gpus": measured(gpu), "message": what happened, in words}.
    """
    gpus = measured(gpu)
    considered = []
    for name, doc in auto_order(profiles):
        # A profile that says nothing is sized for one host.
        result = fit({"nodes": 1, **doc}, gpus, nodes=nodes)
        considered.append({"name": name, **result})
    chosen = next((c["name"] for c in considered if c["ok"]), None)
    unknown = unknown_pci_ids(gpu) if gpus is None else []
    if unknown:
        message = (
            "sglang_server_profile: auto picks a profile from the measured GPUs; no NVIDIA "
            f"driver is loaded yet and the PCI id(s) {', '.join(unknown)} are not among the "
            f"GPUs gpuhost knows without one ({', '.join(sorted(PCI_GPUS))}); allowed here: a "
            "profile name "
            f"({', '.join(c['name'] for c in considered) or 'none in the auto list'}) or '' "
            "with sglang_server_model_id"
        )
    elif gpus is None:
        message = (
            "sglang_server_profile: auto picks a profile from the measured GPUs, and none was "
            "measured (no NVIDIA driver loaded and PCI ids not among the recorded GPUs, or no "
            "GPU found); allowed here: a profile name "
            f"({', '.join(c['name'] for c in considered) or 'none in the auto list'}) or '' "
            "with sglang_server_model_id"
        )
    elif chosen:
        message = (
            f"sglang_server_profile: auto picked {chosen} for {_group(nodes)}{gpus['count']}x "
            f"{'/'.join(gpus['names'])} ({_gib(gpus['memory_gib'])} GiB, "
            f"SM{'/SM'.join(map(str, gpus['sms']))}"
            + (", known from the PCI ids: no driver loaded yet)" if gpus["from"] == "pci" else ")")
        )
    else:
        why = "; ".join(f"{c['name']}: {' and '.join(c['reasons'])}" for c in considered)
        message = (
            f"sglang_server_profile: auto found no profile for {_group(nodes)}{gpus['count']}x "
            f"{'/'.join(gpus['names'])} ({_gib(gpus['memory_gib'])} GiB each, "
            f"SM{'/SM'.join(map(str, gpus['sms']))}). {why or 'no profile has auto_order'}. "
            "Allowed: a profile that fits, or '' with sglang_server_model_id and "
            "sglang_server_tp_size for a model of your own"
        )
    return {"selected": chosen, "considered": considered, "gpus": gpus, "message": message}
