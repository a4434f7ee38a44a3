"""SGLang's custom all-reduce, judged for the GPUs a server's TP group really uses.

Pure: the nccl role's decision (its `gpu_links` matrix) and the server's layout in, a
{disable, reason, groups} out. The rule is SGLang's own, read from the pinned wheels
(0.5.10.post1, the default lane, and 0.5.23), python/sglang/srt/distributed/device_communicators/:

- custom_all_reduce_utils.py `can_use_custom_all_reduce_with_nvlink` (both versions): off for
  world size 1, for a group that spans nodes, for a world size outside the class's list
  (`CustomAllreduce._SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]` in custom_all_reduce.py), when
  `world_size > 2 and not full_nvlink` ("not supported on more than two PCIe-only GPUs";
  `is_full_nvlink` asks NVML for NVLink P2P between every pair of the group's physical
  devices), and when `can_p2p(rank, world_size)` fails (a real peer access between the local
  devices 0..world_size-1).
- 0.5.23 custom_all_reduce.py `dispatch_custom_allreduce`: on CUDA it first tries
  CustomAllReduceV2 (custom_all_reduce_v2.py `can_use_custom_all_reduce_v2`: the same check
  with the world sizes of configs/custom_all_reduce_v2.py `get_supported_world_sizes`, 2..8 in
  every architecture's table, and full NVLink required), else the class above. 0.5.10.post1
  has V2 only behind SGLANG_USE_JIT_ALL_REDUCE (off).
- Which GPUs a TP group uses: entrypoints/engine.py (and managers/data_parallel_controller.py
  for DP replicas): gpu_id = base_gpu_id + dp offset + (pp_rank % pp_per_node) * tp_per_node
  + (tp_rank % tp_per_node) * gpu_id_step, an index into CUDA_VISIBLE_DEVICES when it is set
  (custom_all_reduce_utils.py maps it back the same way).

Driver facts stand in for SGLang's run-time probes: a pair counts as P2P when `topo -p2p`
reads OK both ways, as NVLink when in addition `topo -m` shows NV#. Only the direction that
matters for safety is strict: the flag is set whenever any group lacks P2P, also where
SGLang's own probe looks at other GPUs (it probes devices 0..N-1 whatever --base-gpu-id says).
"""

from __future__ import annotations

import re

SOURCE = (
    "sglang 0.5.10.post1 and 0.5.23 srt/distributed/device_communicators/"
    "custom_all_reduce_utils.py can_use_custom_all_reduce_with_nvlink (world size, "
    "is_full_nvlink, can_p2p), custom_all_reduce.py CustomAllreduce._SUPPORTED_WORLD_SIZES, "
    "0.5.23 custom_all_reduce_v2.py can_use_custom_all_reduce_v2; srt/entrypoints/engine.py "
    "(which GPU each TP rank uses)"
)
# CustomAllreduce._SUPPORTED_WORLD_SIZES, the same in both pinned versions.
LEGACY_WORLD_SIZES = (2, 4, 6, 8)
# CustomAllReduceV2 world sizes present in every architecture's table (0.5.23), full NVLink only.
V2_WORLD_SIZES = (2, 3, 4, 5, 6, 7, 8)
# First version read here that uses V2 by default on CUDA (0.5.10.post1: opt-in, off).
V2_DEFAULT_SINCE = (0, 5, 23)
# Server flags that place TP ranks on GPUs (engine.py), by their catalogue names.
LAYOUT_FLAGS = (
    "--pp-size",
    "--dp-size",
    "--enable-dp-attention",
    "--nnodes",
    "--base-gpu-id",
    "--gpu-id-step",
)
LINKS = ("X", "nvlink", "p2p", "none", "unknown")


def links_from_pairs(count, pairs, known):
    """The decision's `gpu_links`: per GPU pair nvlink / p2p / none (unknown without facts).

    `pairs` are gpuhost_nccl's (i, j, path type, P2P OK) tuples."""
    links = [["X" if i == j else "unknown" for j in range(count)] for i in range(count)]
    for i, j, path, ok in pairs:
        link = ("nvlink" if path == "NV" else "p2p") if ok else ("none" if known else "unknown")
        links[i][j] = links[j][i] = link
    return links


def parse_version(text):
    """'0.5.10.post1' -> (0, 5, 10); None when unknown."""
    found = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    return tuple(int(p or 0) for p in found.groups()) if found else None


def _int(value, default):
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ValueError(value)
    return int(str(value).strip())


class _Unjudged(ValueError):
    """The server's layout cannot be mapped to GPUs; the message says why."""


def visible_devices(env, count):
    """Physical GPU index per CUDA ordinal: CUDA_VISIBLE_DEVICES as SGLang reads it."""
    text = (env or {}).get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return list(range(count))
    text = str(text).strip()
    if not text:
        raise _Unjudged("CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU")
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        # custom_all_reduce_utils.py does list(map(int, ...)): UUIDs/MIG names end its setup.
        raise _Unjudged(
            f"CUDA_VISIBLE_DEVICES={text!r} names GPUs by something other than an index: "
            "SGLang's custom all-reduce setup reads it as integers and gives up"
        ) from None
    if any(not 0 <= i < count for i in ids) or len(set(ids)) != len(ids):
        raise _Unjudged(f"CUDA_VISIBLE_DEVICES={text!r} does not name distinct GPUs 0..{count - 1}")
    return ids


def tp_groups(count, tp_size, layout=None, env=None):
    """(groups, probed): the physical GPUs of each TP group this node runs, and the devices
    SGLang's P2P probe looks at (the first tp_per_node visible ones). Raises _Unjudged.

    layout: {flag: value} for LAYOUT_FLAGS (missing: SGLang's defaults)."""
    layout = layout or {}
    try:
        tp = _int(tp_size, 1)
        pp = _int(layout.get("--pp-size"), 1)
        dp = _int(layout.get("--dp-size"), 1)
        nnodes = _int(layout.get("--nnodes"), 1)
        base = _int(layout.get("--base-gpu-id"), 0)
        step = _int(layout.get("--gpu-id-step"), 1)
    except (TypeError, ValueError):
        raise _Unjudged(
            f"the server layout is not all integers: TP {tp_size!r}, {layout!r}"
        ) from None
    if min(tp, pp, dp, nnodes, step) < 1 or base < 0:
        raise _Unjudged(f"the server layout is out of range: TP {tp}, {layout!r}")
    visible = visible_devices(env, count)
    # engine.py _calculate_rank_ranges
    pp_per_node = max(pp // nnodes, 1)
    nodes_per_tp_group = max(nnodes // pp, 1)
    tp_per_node = tp // nodes_per_tp_group
    if nodes_per_tp_group > 1:
        raise _Unjudged(
            f"the TP group spans {nodes_per_tp_group} nodes: SGLang 0.5.10.post1 turns custom "
            "all-reduce off itself, 0.5.23 keeps it only inside one multi-node NVLink domain, "
            "which host facts do not show"
        )
    replicas = dp if dp > 1 and not layout.get("--enable-dp-attention") else 1
    groups = []
    for replica in range(replicas):
        offset = replica * tp * pp * step  # data_parallel_controller.py launch_dp_schedulers
        for pp_rank in range(pp_per_node):
            ordinals = [
                base + offset + pp_rank * tp_per_node + rank * step for rank in range(tp_per_node)
            ]
            if max(ordinals) >= len(visible):
                raise _Unjudged(
                    f"TP ranks land on CUDA devices {ordinals}, beyond the {len(visible)} visible"
                )
            groups.append([visible[o] for o in ordinals])
    return groups, visible[:tp_per_node]


def _pairs(links, group):
    return [(a, b, links[a][b]) for n, a in enumerate(group) for b in group[n + 1 :]]


def _without_p2p(pairs, shown):
    """The reason a group cannot run custom all-reduce for want of P2P, or ''."""
    missing = [(a, b, link) for a, b, link in pairs if link not in ("nvlink", "p2p")]
    if not missing:
        return ""
    a, b, link = missing[0]
    why = "P2P unknown (no topology facts)" if link == "unknown" else "no P2P in the driver"
    return (
        f"GPUs {a} and {b} of the TP group ({shown}) have {why}, {len(missing)} pair(s) in "
        "all: custom all-reduce reads peer memory directly and needs P2P between every pair "
        "of its group (a granted-but-broken path hangs or gives wrong sums)"
    )


def judge_group(links, group, sglang_version=None):
    """(disable, reason) for one TP group (physical GPU indices) per SGLang's rule."""
    size = len(group)
    shown = ",".join(map(str, group))
    if size < 2:
        return False, (
            f"TP group of one GPU ({shown or 'none'}): SGLang builds no custom all-reduce "
            "(world size 1), the flag does not matter"
        )
    pairs = _pairs(links, group)
    missing = _without_p2p(pairs, shown)
    if missing:
        return True, missing
    full_nvlink = all(link == "nvlink" for _, _, link in pairs)
    version = parse_version(sglang_version)
    v2 = full_nvlink and version is not None and version >= V2_DEFAULT_SINCE
    sizes = sorted(set(LEGACY_WORLD_SIZES) | (set(V2_WORLD_SIZES) if v2 else set()))
    named = f"SGLang {sglang_version}" if version else "SGLang"
    if size not in sizes:
        return True, f"TP {size}: {named} builds custom all-reduce only for TP {sizes}"
    if size > 2 and not full_nvlink:
        return True, (
            f"TP {size} on GPUs {shown} without NVLink between every pair: {named} does not run "
            "custom all-reduce on more than two PCIe-only GPUs"
        )
    via = "NVLink" if full_nvlink else "P2P over PCIe"
    return False, (
        f"TP {size} on GPUs {shown}, {via} between every pair: {named} runs custom all-reduce "
        "(faster than NCCL for small messages)"
    )


def judge(links, groups, probed=None, sglang_version=None):
    """(disable, reason) for all TP groups of a server: off if any group is off."""
    results = [judge_group(links, g, sglang_version) for g in groups]
    if probed and groups and probed not in groups and len(probed) >= 2:
        # SGLang probes P2P on devices 0..N-1, not on the group (can_p2p(rank, world_size)):
        # without P2P there it turns custom all-reduce off itself.
        why = _without_p2p(_pairs(links, probed), ",".join(map(str, probed)))
        if why:
            results.append((True, f"SGLang's P2P probe looks at GPUs {probed}: {why}"))
    for off, why in results:
        if off:
            return True, why
    return False, results[0][1] if results else "no TP group on this node"


def host_default(links, sglang_version=None):
    """(disable, reason) for a TP group of all the host's GPUs, the default placement."""
    count = len(links)
    if count < 2:
        return False, "one GPU or none: no all-reduce, the flag does not matter"
    off, why = judge_group(links, list(range(count)), sglang_version)
    return off, f"for TP {count} on all GPUs (role sglang_server judges its own TP group): {why}"


def _valid_links(links):
    return (
        isinstance(links, list)
        and bool(links)
        and all(
            isinstance(row, list) and len(row) == len(links) and all(c in LINKS for c in row)
            for row in links
        )
    )


def _decided_reason(nccl):
    for item in nccl.get("reasons") or []:
        if isinstance(item, dict) and item.get("variable") == "disable_custom_all_reduce":
            return str(item.get("reason", ""))
    return "see gpuhost_nccl.reasons"


def for_server(nccl, tp_size, layout=None, env=None, sglang_version=None):
    """{disable, reason, groups} for a server, or None while the nccl decision is unknown.

    nccl: the gpuhost_nccl fact. An override in nccl_env_overrides wins; a decision recorded
    before `gpu_links` existed keeps its host-wide value."""
    if not isinstance(nccl, dict) or not isinstance(nccl.get("disable_custom_all_reduce"), bool):
        return None
    host = nccl["disable_custom_all_reduce"]
    if any(
        isinstance(o, dict) and o.get("variable") == "disable_custom_all_reduce"
        for o in nccl.get("overrides") or []
    ):
        return {"disable": host, "reason": "overridden in nccl_env_overrides", "groups": []}
    links = nccl.get("gpu_links")
    if not _valid_links(links):
        return {"disable": host, "reason": _decided_reason(nccl), "groups": []}
    try:
        groups, probed = tp_groups(len(links), tp_size, layout, env)
    except _Unjudged as exc:
        return {"disable": True, "reason": str(exc), "groups": []}
    disable, reason = judge(links, groups, probed, sglang_version)
    return {"disable": disable, "reason": reason, "groups": groups}
