"""Judging an all-reduce sweep (pure): NCCL log parsing, thresholds, diagnosis, autotune pick.

The sweep itself (roles/nccl/files/gpuhost_allreduce_sweep.py) only measures and reports raw
numbers and NCCL's INFO lines; everything that decides pass/fail lives here so that it is
unit-tested against recorded sweeps (tests/fixtures/nccl/).
"""

from __future__ import annotations

import math
import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import finding

# "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "Channel 09 : 6[6] -> 7[7] via
# SHM/direct/direct", "Channel 14/0 : 15[7] -> 0[0] [send] via NET/Socket/0".
_CHANNEL = re.compile(
    r"Channel (\d+)(?:/\d+)? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\](?: \[(send|receive)\])? via (\S+)"
)
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_ENV_SET = re.compile(r"(NCCL_[A-Z0-9_]+) set by environment to (\S+?)\.?$")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")

LARGE_FROM_BYTES = 64 << 20  # busbw is judged at its plateau: 64 MiB .. 1 GiB
SMALL_UP_TO_BYTES = 256 << 10  # inference all-reduces: 32-256 KiB (docs/reference.md section 4)
_EXPECTED_TRANSPORT = {"nvlink": "P2P", "pcie_p2p": "P2P", "pcie_no_p2p": "SHM"}


def parse_nccl_log(lines):
    """Transports, version and environment NCCL reports in its NCCL_DEBUG=INFO output."""
    transports, via, env_set, p2p_disabled, warnings = {}, {}, {}, [], []
    version, nvls = None, None
    for line in lines or []:
        found = _CHANNEL.search(line)
        if found:
            path = found.group(5)
            kind = path.split("/")[0].upper()
            transports[kind] = transports.get(kind, 0) + 1
            via[path] = via.get(path, 0) + 1
            continue
        found = _VERSION.search(line)
        if found and version is None:
            version = found.group(1)
        found = _ENV_SET.search(line)
        if found:
            env_set[found.group(1)] = found.group(2)
        found = _NVLS.search(line)
        if found:
            nvls = found.group(1) is None
        if "P2P is disabled between" in line and len(p2p_disabled) < 5:
            p2p_disabled.append(line.split("NCCL INFO ")[-1].split("NCCL WARN ")[-1].strip())
        if " NCCL WARN " in line and len(warnings) < 10:
            warnings.append(line.split(" NCCL WARN ", 1)[1].strip())
    if not transports:
        dominant = "unknown"
    elif len(transports) == 1:
        dominant = next(iter(transports))
    else:
        dominant = "mixed"
    return {
        "version": version,
        "transport": dominant,
        "transports": transports,
        "via": via,
        "env_set": env_set,
        "nvls": nvls,
        "p2p_disabled": p2p_disabled,
        "warnings": warnings,
    }


def _rows_by_size(run):
    return {int(r["bytes"]): r for r in run.get("rows") or []}


def peak_busbw(run, large_from=LARGE_FROM_BYTES):
    values = [r["busbw_gbps"] for b, r in _rows_by_size(run).items() if b >= large_from]
    return max(values) if values else 0.0


def small_latency(run, up_to=SMALL_UP_TO_BYTES):
    """Per size, microseconds per all-reduce of the small messages inference sends."""
    return {b: round(r["time_us"], 2) for b, r in sorted(_rows_by_size(run).items()) if b <= up_to}


def _origin(variable, decision):
    if any(o["variable"] == variable for o in decision.get("overrides") or []):
        return "nccl_env_overrides"
    if variable in (decision.get("env") or {}):
        return "nccl.env"
    return "the inherited environment"


def diagnose(klass, parsed, decision, peak=None, threshold=None):
    """One paragraph: what NCCL chose and the likely cause, for a run that fell short."""
    transport = parsed["transport"]
    env_set = parsed["env_set"]
    expected = _EXPECTED_TRANSPORT.get(klass, "P2P")
    parts = [f"NCCL transport: {transport} {parsed['transports'] or ''}".rstrip()]
    if peak is not None and threshold is not None:
        parts.append(f"peak busbw {peak:.1f} GB/s < {threshold:g} GB/s expected for {klass}")
    causes = []
    if env_set.get("NCCL_P2P_DISABLE") == "1" or env_set.get("NCCL_P2P_LEVEL") in ("LOC", "0"):
        var = "NCCL_P2P_DISABLE" if "NCCL_P2P_DISABLE" in env_set else "NCCL_P2P_LEVEL"
        causes.append(
            f"P2P is switched off by {var}={env_set[var]} (from {_origin(var, decision)})"
            + (
                "; on NVLink that costs >10x (docs/reference.md section 4): remove it"
                if klass == "nvlink"
                else ""
            )
        )
    if env_set.get("NCCL_SHM_DISABLE") == "1":
        causes.append(
            f"NCCL_SHM_DISABLE=1 (from {_origin('NCCL_SHM_DISABLE', decision)}) forces the "
            "network transport inside one host: remove it"
        )
    if "NET" in parsed["transports"] and not causes:
        causes.append(
            "GPUs of one host talk over the network transport: SHM unusable (/dev/shm too "
            "small or not shared, e.g. a container without --ipc=host) or disabled"
        )
    if expected == "P2P" and transport in ("SHM", "mixed") and not causes:
        causes.append(
            "the topology promised P2P but NCCL did not use it on every pair: the driver "
            "refused P2P at run time ("
            + ("; ".join(parsed["p2p_disabled"]) or "no 'P2P is disabled' line")
            + "); inside a VM, P2P needs the hypervisor's clique/ACS setup"
            + " (docs/reference.md section 5)"
        )
    if transport == expected and not causes:
        if klass == "nvlink":
            causes.append(
                "P2P over NVLink was used but is slow: NVLink links down or degraded "
                "(nvidia-smi nvlink -s), GPUs busy, or clocks/power capped"
            )
        elif klass == "pcie_p2p":
            causes.append(
                "P2P over PCIe was used but is slow: a degraded PCIe link (see the "
                "preflight PCIe findings), ACS forcing traffic through the root complex, "
                "or busy GPUs"
            )
        else:
            causes.append(
                "host-memory (SHM) path is slow: NUMA placement of the processes, memory "
                "bandwidth, or too few channels (raise NCCL_MIN_CTAS through nccl_env_overrides)"
            )
    if transport == "unknown" and not causes:
        causes.append("no 'via' lines in the NCCL log: NCCL_DEBUG output was not captured")
    parts.append("likely cause: " + "; ".join(causes))
    return ". ".join(parts)


def _transport_check(klass, parsed):
    """NET inside one host is always wrong; SHM where every pair should use P2P is wrong on
    NVLink (>10x slower) and suspicious on PCIe."""
    used = parsed["transports"]
    expected = _EXPECTED_TRANSPORT.get(klass)
    status, message = "pass", f"NCCL used {used or 'an unreported transport'}"
    if not used:
        status = "warn"
        message = "no transport in the NCCL log (NCCL_DEBUG=INFO output missing)"
    elif "NET" in used:
        status = "fail"
        message = f"GPUs of one host talk over the network transport: {used}"
    elif expected == "P2P" and set(used) - {"P2P", "NVLS"}:
        status = "fail" if klass == "nvlink" else "warn"
        message = f"P2P expected on every pair ({klass}), NCCL used {used}"
    return {"check": "transport", "status": status, "message": message}


def evaluate(run, decision, thresholds, large_from=LARGE_FROM_BYTES):
    """Pass/fail of one sweep run against the thresholds of the host's topology class."""
    klass = decision.get("topology_class", "none")
    limits = (thresholds or {}).get(klass) or {}
    parsed = parse_nccl_log(run.get("nccl_log") or [])
    rows = run.get("rows") or []
    checks = []

    incomplete = bool(run.get("timed_out") or run.get("error") or not rows)
    why = "timed out (hang)" if run.get("timed_out") else (run.get("error") or "no results")
    checks.append(
        {
            "check": "completed",
            "status": "fail" if incomplete else "pass",
            "message": why if incomplete else f"{len(rows)} sizes",
        }
    )
    wrong = [int(r["bytes"]) for r in rows if not r.get("correct", False)]
    if rows:
        checks.append(
            {
                "check": "correct",
                "status": "fail" if wrong else "pass",
                "message": f"wrong sums at sizes {wrong}" if wrong else "all sums exact",
            }
        )
        checks.append(_transport_check(klass, parsed))

    peak = peak_busbw(run, large_from)
    minimum = limits.get("min_busbw_gbps")
    low = bool(rows) and minimum is not None and peak < float(minimum)
    if rows and minimum is not None:
        checks.append(
            {
                "check": "busbw",
                "status": "fail" if low else "pass",
                "message": f"peak busbw {peak:.1f} GB/s (>= {large_from >> 20} MiB), "
                f"threshold {minimum:g} for {klass}",
            }
        )
    lat = small_latency(run)
    maximum = limits.get("max_latency_us")
    if lat and maximum is not None:
        first = next(iter(lat.values()))
        checks.append(
            {
                "check": "latency",
                "status": "fail" if first > float(maximum) else "pass",
                "message": f"{next(iter(lat))} B all-reduce {first:.1f} us, threshold {maximum:g}",
            }
        )

    failed = [c for c in checks if c["status"] == "fail"]
    diagnosis = ""
    if failed:
        # What NCCL did and why, with the gravest finding first: a hang, then wrong sums.
        base = diagnose(klass, parsed, decision, peak if low else None, minimum if low else None)
        if incomplete:
            diagnosis = (
                f"the sweep did not complete: {why}. A granted-but-broken P2P path hangs rather "
                f"than erroring (docs/reference.md section 5, NVIDIA/nccl#2335). {base}"
            )
        elif wrong:
            diagnosis = (
                f"all-reduce returned wrong sums at {wrong}: a P2P path the driver grants "
                "does not deliver writes (docs/reference.md section 5). Do not serve on this host: "
                f"fix the passthrough/P2P setup or force P2P off. {base}"
            )
        else:
            diagnosis = base
    return {
        "status": "fail" if failed else "pass",
        "topology_class": klass,
        "transport": parsed["transport"],
        "transports": parsed["transports"],
        "via": parsed["via"],
        "nccl_version": parsed["version"],
        "env_seen_by_nccl": parsed["env_set"],
        "peak_busbw_gbps": round(peak, 2),
        # String keys: facts travel through JSON (the fact cache, the report).
        "latency_us": {str(b): v for b, v in lat.items()},
        "busbw_gbps": {str(r["bytes"]): round(r["busbw_gbps"], 2) for r in rows},
        "checks": checks,
        "diagnosis": diagnosis,
        "message": (
            f"NCCL all-reduce {klass} FAILED: "
            + "; ".join(f"{c['check']}: {c['message']}" for c in failed)
            + f". Diagnosis: {diagnosis}"
            if failed
            else f"NCCL all-reduce {klass}: peak busbw {peak:.1f} GB/s over {parsed['transport']}, "
            f"sums exact"
        ),
    }


def _score(run, large_from):
    values = [r["busbw_gbps"] for b, r in _rows_by_size(run).items() if b >= large_from]
    if not values or min(values) <= 0:
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _usable(run):
    return (
        bool(run.get("rows"))
        and not run.get("error")
        and not run.get("timed_out")
        and all(r.get("correct") for r in run["rows"])
    )


def compare_to_best(runs, name="derived", large_from=LARGE_FROM_BYTES):
    """Per size >= large_from: busbw of `name` over the best busbw among all runs."""
    ref = _rows_by_size(next(r for r in runs if r["name"] == name))
    ratios = {}
    for size, row in sorted(ref.items()):
        if size < large_from:
            continue
        best = max(
            _rows_by_size(r).get(size, {}).get("busbw_gbps", 0.0) for r in runs if _usable(r)
        )
        ratios[str(size)] = round(row["busbw_gbps"] / best, 4) if best else 0.0
    return ratios


# Small all-reduces timed from Python vary by about 1.5 us at 21 us between two runs of the
# same env on 2x H200 (tests/fixtures/nccl/h200x2-autotune.json: derived vs nccl-defaults).
LATENCY_TOLERANCE = 0.10


def autotune_pick(runs, margin=0.03, large_from=LARGE_FROM_BYTES):
    """Keep the derived env unless a candidate beats it by more than `margin` at large sizes
    without being slower on small messages (what inference sends, within the measurement
    noise LATENCY_TOLERANCE); record every run."""
    derived = next(r for r in runs if r["name"] == "derived")
    d_lat = small_latency(derived)
    d_small = sum(d_lat.values()) / len(d_lat) if d_lat else None
    table, best, best_score = [], derived, _score(derived, large_from) if _usable(derived) else 0.0
    for run in runs:
        lat = small_latency(run)
        mean_small = sum(lat.values()) / len(lat) if lat else None
        score = _score(run, large_from) if _usable(run) else 0.0
        table.append(
            {
                "name": run["name"],
                "env": run.get("env", {}),
                "usable": _usable(run),
                "score_busbw_gbps": round(score, 2),
                "peak_busbw_gbps": round(peak_busbw(run, large_from), 2),
                "small_latency_us": round(mean_small, 2) if mean_small is not None else None,
                "busbw_gbps": {
                    str(b): r["busbw_gbps"] for b, r in sorted(_rows_by_size(run).items())
                },
                "error": run.get("error"),
            }
        )
        small_ok = d_small is None or (
            mean_small is not None and mean_small <= d_small * (1 + LATENCY_TOLERANCE)
        )
        if run is not derived and small_ok and score > best_score * (1 + margin):
            best, best_score = run, score
    ratios = compare_to_best(runs, "derived", large_from)
    return {
        "chosen": best["name"],
        "env": dict(best.get("env", {})),
        "margin": margin,
        "derived_ratio_to_best": ratios,
        "derived_min_ratio": min(ratios.values()) if ratios else None,
        "candidates": table,
    }


def findings(decision, verified=None, skipped=""):
    """`nccl.*` items for gpuhost_findings (docs/facts.md): the decision and the sweep."""
    env = decision.get("env") or {}
    shown = " ".join(f"{k}={v}" for k, v in env.items()) or "no NCCL variable"
    # Host-wide (TP = all GPUs); the server's TP group is judged in its own finding.
    car = "off" if decision.get("disable_custom_all_reduce") else "on"
    if decision.get("gpu_count", 0) >= 2:
        car += f" for TP {decision['gpu_count']} on all GPUs"
    notes = list(decision.get("warnings") or []) + [
        f"{o['variable']}={o['value']}: {o['warning']}"
        for o in decision.get("overrides") or []
        if o.get("warning")
    ]
    out = [
        finding(
            "nccl.decision",
            "warn" if notes else "pass",
            f"{decision.get('topology_class')}: {shown}; custom all-reduce {car}",
            "; ".join(notes),
        )
    ]
    if decision.get("gpu_count", 0) < 2:
        return out
    if verified:
        failed = verified.get("status") == "fail"
        out.append(
            finding(
                "nccl.verify",
                "fail" if failed else "pass",
                verified.get("message", ""),
                verified.get("diagnosis", "") if failed else "",
            )
        )
    else:
        out.append(
            finding(
                "nccl.verify",
                "warn",
                f"all-reduce sweep not run: {skipped}",
                "run the nccl role again once torch is installed, or set nccl_verify_python",
            )
        )
    return out


def override_findings(decision):
    """`preflight.nccl_override` items: each nccl_env_overrides entry that the measured
    topology makes harmful or pointless, shown by preflight before any change (the nccl
    stage applies the override later; this is where the user sees it)."""
    harmful = [o for o in decision.get("overrides") or [] if o.get("warning")]
    if not harmful:
        count = len(decision.get("overrides") or [])
        return [
            finding(
                "preflight.nccl_override",
                "pass",
                f"{count} NCCL override(s), none harmful on this topology",
            )
        ]
    return [
        finding(
            "preflight.nccl_override",
            "warn",
            f"nccl_env_overrides.{o['variable']}={o['value']}: {o['warning']} "
            f"({decision.get('topology_class')} topology)",
            f"remove {o['variable']} from nccl_env_overrides (derived here: "
            f"{o.get('derived') if o.get('derived') is not None else 'unset'}) unless a "
            "measurement on this host shows it helps",
        )
        for o in harmful
    ]
