"""NCCL settings derived from the measured GPU topology (pure: facts in, decision out).

The decision table, with its sources, is in roles/nccl/README.md; its rules are in
gpuhost_nccl_rules.py, each naming the source it rests on in the `source` of its reason, so
the report can show why a variable is (or is not) set. This module checks the input,
summarises the GPU pairs for the rules, applies nccl_env_overrides (`decide`) and the
autotune winner (`autotune_candidates`, `apply_autotune`). Nothing here touches the host:
the role and the unit tests call the same functions on the same input dict, which
`input_from_facts` builds from the preflight facts (docs/facts.md) in exactly one place.
"""

from __future__ import annotations

import re

from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_car as car
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_rules as rules

# nvidia-smi topo -m path types, best first. NCCL has no NODE: two host bridges under one
# CPU are PATH_PHB to it, so NODE ranks with PHB (paths.cc, topo.h).
_PATH_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 4, "SYS": 5}
# NCCL uses P2P up to PXB unless told otherwise (paths.cc: `int p2pLevel = PATH_PXB`).
_NCCL_DEFAULT_P2P_RANK = _PATH_RANK["PXB"]

TOPOLOGY_CLASSES = ("none", "single", "nvlink", "pcie_p2p", "pcie_no_p2p")
_ENV_NAME = re.compile(r"^NCCL_[A-Z0-9_]+$")
# Values must survive systemd's EnvironmentFile, a shell and `docker --env-file` unquoted.
_ENV_VALUE = re.compile(r"^[A-Za-z0-9_.,:/^@%+=-]*$")


class NcclInputError(ValueError):
    """The decision input or an override is malformed; the message names the field."""


def _path_type(label):
    text = str(label).strip().upper()
    if text.startswith("NV"):
        return "NV"
    if text == "SOC":  # older nvidia-smi name for SYS
        return "SYS"
    return text if text in _PATH_RANK else "SYS"


def parse_version(value):
    """'2.28.3', '2.28.3-1', (2, 28, 3) or '2.28.3+cuda13.0' -> (2, 28, 3); None if unknown."""
    if value is None or value == "" or value == "unknown":
        return None
    if isinstance(value, (list, tuple)):
        parts = [int(p) for p in value[:3]]
    else:
        found = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", str(value))
        if not found:
            raise NcclInputError(f"nccl_version: cannot read a version from {value!r}")
        parts = [int(p) for p in found.groups() if p is not None]
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


def _bool_or_none(value):
    return value if isinstance(value, bool) else None


def input_from_facts(gpu, host, nccl_version=None):
    """The one mapping from the preflight facts (docs/facts.md) to the decision input."""
    gpu = gpu or {}
    host = host or {}
    driver_loaded = bool((gpu.get("driver") or {}).get("loaded", False))
    gpus = gpu.get("gpus") or []
    count = len(gpus) if driver_loaded else gpu.get("count", 0)
    if not gpu.get("present", bool(count)):
        count = 0
    p2p = gpu.get("p2p") or {}
    read, write = p2p.get("read") or [], p2p.get("write") or []
    # NCCL requires both directions OK (paths.cc checks p2pStatusRead and p2pStatusWrite).
    combined = [
        [
            "X" if i == j else ("OK" if r == "OK" and w == "OK" else (r if r != "OK" else w))
            for j, (r, w) in enumerate(zip(row_r, row_w, strict=False))
        ]
        for i, (row_r, row_w) in enumerate(zip(read, write, strict=False))
    ]
    topo = gpu.get("topology") or {}
    numa = [n for n in topo.get("numa_affinity") or [] if isinstance(n, int)]
    numa_nodes = len(set(numa)) if numa else host.get("numa_nodes")
    virt = host.get("virt") or {}
    return {
        "gpu_count": count if isinstance(count, int) else 0,
        "driver_loaded": driver_loaded,
        "p2p": combined,
        "topology": topo.get("matrix") or [],
        "nvlink": _bool_or_none(topo.get("nvlink")),
        "numa_nodes": numa_nodes if isinstance(numa_nodes, int) else None,
        "virt": virt.get("type", "unknown"),
        "container": virt.get("container", "unknown"),
        "ib_present": _bool_or_none(host.get("ib_present")),
        "nccl_version": nccl_version or None,
    }


def _check_input(inp):
    count = inp.get("gpu_count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise NcclInputError(f"gpu_count: expected an integer >= 0, got {count!r}")
    for key in ("p2p", "topology"):
        matrix = inp.get(key) or []
        if matrix and (len(matrix) != count or any(len(row) != count for row in matrix)):
            raise NcclInputError(f"{key}: expected a {count}x{count} matrix, got {matrix!r}")


def _pairs(inp):
    """Per GPU pair: (i, j, path type, P2P OK), for the matrices the facts hold."""
    n = inp["gpu_count"]
    topo, p2p = inp.get("topology") or [], inp.get("p2p") or []
    out = []
    for i in range(n):
        for j in range(i + 1, n):
            path = _path_type(topo[i][j]) if topo else "SYS"
            ok = bool(p2p) and p2p[i][j] == "OK" and p2p[j][i] == "OK"
            out.append((i, j, path, ok))
    return out


def _summarise(inp):
    """Topology class and the facts each rule needs, from the pairs."""
    pairs = _pairs(inp)
    known = bool(inp.get("p2p")) and bool(inp.get("topology"))
    widen = [p for p in pairs if p[3] and p[2] in ("PHB", "NODE")]
    level_rank = _PATH_RANK["PHB"] if widen else _NCCL_DEFAULT_P2P_RANK
    effective = [p[3] and _PATH_RANK[p[2]] <= level_rank for p in pairs]
    nvlink_all = known and all(p[2] == "NV" for p in pairs)
    if nvlink_all and all(p[3] for p in pairs):
        klass = "nvlink"
    elif known and all(effective):
        klass = "pcie_p2p"
    else:
        klass = "pcie_no_p2p"
    return {
        "pairs": pairs,
        "known": known,
        "p2p_all": known and all(p[3] for p in pairs),
        "p2p_none": not any(p[3] for p in pairs),
        "nvlink_any": any(p[2] == "NV" for p in pairs) or inp.get("nvlink") is True,
        "nvlink_all": nvlink_all,
        "widen": widen,
        "sys_ok": [p for p in pairs if p[3] and p[2] == "SYS"],
        "nvlink_no_p2p": [p for p in pairs if p[2] == "NV" and not p[3]],
        "class": klass,
    }


def _normalise_override(name, value):
    if not _ENV_NAME.match(str(name)):
        raise NcclInputError(
            f"nccl_env_overrides: {name!r} is not an NCCL variable (NCCL_[A-Z0-9_]+) "
            "nor disable_custom_all_reduce"
        )
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if not isinstance(value, (str, int)):
        raise NcclInputError(f"nccl_env_overrides.{name}: expected a string, number or null")
    text = str(value)
    if not _ENV_VALUE.match(text):
        raise NcclInputError(
            f"nccl_env_overrides.{name}: {text!r} has characters an EnvironmentFile cannot "
            "carry unquoted (allowed: letters, digits and _.,:/^@%+=-)"
        )
    return text


def _override_warning(name, value, inp, s):
    p2p_off = (name == "NCCL_P2P_DISABLE" and value == "1") or (
        name == "NCCL_P2P_LEVEL" and value in ("LOC", "0")
    )
    if p2p_off and s["nvlink_any"]:
        return "disables P2P over NVLink: >10x lower busbw (332 -> 29 GB/s on 2x H200)"
    if name == "NCCL_SHM_DISABLE" and value == "1":
        return "forces the network transport between GPUs of one host (4.4 GB/s on 2x H200)"
    if name == "NCCL_IB_DISABLE" and value == "1" and inp.get("ib_present"):
        return "an IB device is present: multi-host traffic falls back to sockets"
    if name == "NCCL_P2P_LEVEL" and s["p2p_none"] and s["known"]:
        return "no effect: the driver grants no P2P"
    if name == "NCCL_ALLOC_P2P_NET_LL_BUFFERS":
        return "no effect inside one host (network transport only)"
    return ""


def _apply_overrides(decision, overrides, inp, s):
    for name in sorted(overrides or {}):
        value = overrides[name]
        if name == "disable_custom_all_reduce":
            if not isinstance(value, bool):
                raise NcclInputError(
                    "nccl_env_overrides.disable_custom_all_reduce: expected true/false, "
                    f"got {value!r}"
                )
            derived = decision["disable_custom_all_reduce"]
            decision["disable_custom_all_reduce"] = value
            decision["overrides"].append(
                {"variable": name, "value": value, "derived": derived, "warning": ""}
            )
            _override_reason(decision, name, value, derived)
            continue
        text = _normalise_override(name, value)
        derived = decision["env"].get(name)
        if text is None:
            decision["env"].pop(name, None)
        else:
            decision["env"][name] = text
        decision["overrides"].append(
            {
                "variable": name,
                "value": text,
                "derived": derived,
                "warning": _override_warning(name, text, inp, s) if text is not None else "",
            }
        )
        _override_reason(decision, name, text, derived)


def _override_reason(decision, name, value, derived):
    """The final value's reason names the override, and keeps what was derived and why."""
    before = [r for r in decision["reasons"] if r["variable"] == name]
    why = "; ".join(r["reason"] for r in before) or "no derived setting"
    decision["reasons"] = [r for r in decision["reasons"] if r["variable"] != name]
    decision["reasons"].append(
        rules.reason(
            name,
            value,
            f"overridden in nccl_env_overrides (derived {derived!r}: {why})",
            "nccl_env_overrides",
        )
    )


def decide(inp, overrides=None):
    """NCCL env, custom all-reduce and the reasons for a host, from the decision input."""
    _check_input(inp)
    version = parse_version(inp.get("nccl_version"))
    n = inp["gpu_count"]
    s = _summarise(inp) if n >= 2 else None
    warnings = []
    if n == 0:
        klass, env = "none", {}
        reasons = [
            rules.reason("*", None, "no GPU present: nothing for NCCL to do", rules.SRC_FACTS)
        ]
    elif n == 1:
        klass, env = "single", {}
        reasons = [
            rules.reason("*", None, "one GPU: no inter-GPU collective to tune", rules.SRC_FACTS)
        ]
    else:
        klass = s["class"]
        env, reasons, warnings = rules.derive_env(inp, s, version)
        if not inp.get("driver_loaded", True):
            warnings.append(
                "the NVIDIA driver was not loaded when facts were read: topology unknown"
            )
    if n >= 1:
        local_env, local_reason = rules.local_sockets()
        env.update(local_env)
        reasons.append(local_reason)
    # Per GPU pair: what SGLang's custom all-reduce needs to know (gpuhost_nccl_car.py); the
    # host-wide value is for a TP group of all GPUs, role sglang_server judges its own group.
    links = car.links_from_pairs(n, s["pairs"] if s else [], bool(s and s["known"]))
    disable_car, car_reason = car.host_default(links)
    reasons.append(rules.reason("disable_custom_all_reduce", disable_car, car_reason, car.SOURCE))
    decision = {
        "gpu_count": n,
        "topology_class": klass,
        "p2p": "n/a"
        if n < 2
        else ("full" if s["p2p_all"] else ("none" if s["p2p_none"] else "partial")),
        "nccl_version": ".".join(map(str, version)) if version else "unknown",
        "derived_env": dict(sorted(env.items())),
        "env": dict(env),
        "disable_custom_all_reduce": disable_car,
        "gpu_links": links,
        "reasons": reasons,
        "overrides": [],
        "warnings": warnings,
    }
    _apply_overrides(
        decision, overrides, inp, s or {"nvlink_any": False, "p2p_none": True, "known": False}
    )
    decision["env"] = dict(sorted(decision["env"].items()))
    return decision


def autotune_candidates(decision):
    """A few env variants worth measuring against the derived env, named, overrides kept."""
    env = decision["env"]
    # The socket interface is a security setting, not a speed one: no candidate drops it.
    fixed = {o["variable"] for o in decision["overrides"]} | {rules.SOCKET_IFNAME}
    version = parse_version(decision.get("nccl_version"))
    ctas, _ = rules.min_ctas_name(version)
    cands = [{"name": "derived", "env": dict(env)}]

    def add(name, changes):
        new = dict(env)
        for key, value in changes.items():
            if key in fixed:
                return
            if value is None:
                new.pop(key, None)
            else:
                new[key] = value
        if all(new != c["env"] for c in cands):
            cands.append({"name": name, "env": dict(sorted(new.items()))})

    add("nccl-defaults", {k: None for k in env if k not in fixed})
    # The seed recipe's level; SYS only matters where PCIe pairs cross NUMA nodes.
    if decision["p2p"] in ("full", "partial"):
        add("p2p-level-phb", {"NCCL_P2P_LEVEL": "PHB"})
        if decision["topology_class"] != "nvlink":
            add("p2p-level-sys", {"NCCL_P2P_LEVEL": "SYS"})
    # More channels can help a P2P link reach its peak, and fewer or more help SHM.
    counts = (4, 16) if decision["topology_class"] == "pcie_no_p2p" else (rules.MAX_CTAS,)
    for count in counts:
        add(f"min-ctas-{count}", {ctas: str(count)})
    return cands


def apply_autotune(decision, pick, store):
    """The decision with the autotune winner's env; each variable it changed gets its
    reason from the measurement (stored in `store`), the derived one kept beside it."""
    chosen = pick.get("chosen", "derived")
    if chosen == "derived":
        return decision
    new = dict(decision)
    env = dict(sorted(pick["env"].items()))
    old = decision["env"]
    changed = sorted(k for k in set(env) | set(old) if env.get(k) != old.get(k))
    text = f"autotune: candidate {chosen} measured faster than the derived env"
    ratio = pick.get("derived_min_ratio")
    if ratio:
        text += f" (derived reached {ratio:.1%} of it, 64 MiB..1 GiB)"
    reasons = [r for r in decision["reasons"] if r["variable"] not in changed]
    for name in changed:
        before = "; ".join(r["reason"] for r in decision["reasons"] if r["variable"] == name)
        reasons.append(rules.reason(name, env.get(name), f"{text}; derived: {before}", store))
    new["env"] = env
    new["reasons"] = reasons
    return new
