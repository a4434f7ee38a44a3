"""Whether role nccl runs its all-reduce sweep (verify, autotune) on this run.

The sweep moves up to 1 GiB per all-reduce on every GPU. Beside a serving SGLang
(--mem-fraction-static 0.92) it runs out of memory or measures a loaded link: a false verdict.
So it runs only when nothing holds the GPUs (no compute process on them, the server unit not
active; a worker drained from the routers still holds them while its server runs). On held
GPUs the verdict recorded with the same inputs is reported, saying why the sweep did not
run; with no record yet (a host that served before this release) it is deferred, without a
failure, to a run with the server stopped; with changed inputs the run refuses (nothing to
report is honest).

Pure: the role reads `nvidia-smi --query-compute-apps=pid,process_name,used_memory
--format=csv,noheader,nounits` (or `nvidia-smi -q -x`), the unit's ActiveState, the drained
mark and the root-owned record, and passes them here.
"""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET

RUN, SKIP, DEFER, REFUSE = "run", "skip", "defer", "refuse"


def inputs_hash(decision, min_bytes, max_bytes):
    """What a sweep's verdict depends on: topology class, GPU count, NCCL version, the env,
    and the message sizes swept. Short sha256 of their canonical JSON."""
    key = {
        "class": decision.get("topology_class"),
        "gpus": decision.get("gpu_count"),
        "nccl": decision.get("nccl_version"),
        "env": decision.get("env") or {},
        "bytes": [int(min_bytes), int(max_bytes)],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _mib(value):
    text = str(value or "").replace("MiB", "").strip()
    return int(text) if text.isdigit() else None


def gpu_processes(text):
    """Compute processes on the GPUs, from `--query-compute-apps=pid,process_name,used_memory
    --format=csv,noheader,nounits` or from `nvidia-smi -q -x` (its <processes>): a list of
    {pid, name, used_mib}. None when the text is neither (nvidia-smi failed: unknown)."""
    text = (text or "").strip()
    if text.startswith("<?xml") or text.startswith("<nvidia_smi_log"):
        try:
            root = ET.fromstring(text)
        except ET.ParseError:
            return None
        return [
            {
                "pid": int(p.findtext("pid", "0") or 0),
                "name": p.findtext("process_name", "") or "",
                "used_mib": _mib(p.findtext("used_memory")),
            }
            for p in root.iter("process_info")
        ]
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not line.strip():
            continue
        if len(parts) < 2 or not parts[0].isdigit():
            return None  # an error message, not the query's rows
        out.append(
            {
                "pid": int(parts[0]),
                "name": parts[1],
                "used_mib": _mib(parts[2]) if len(parts) > 2 else None,
            }
        )
    return out


def _held_by(processes, server_active, service):
    why = []
    if server_active:
        why.append(f"{service} is active")
    if processes:
        shown = ", ".join(
            f"pid {p['pid']} {p['name']}"
            + (f" ({p['used_mib']} MiB)" if p.get("used_mib") is not None else "")
            for p in processes
        )
        why.append(f"compute processes on the GPUs: {shown}")
    return why


def held_reasons(apps, server_active, service="sglang-server"):
    """Why the GPUs are not free ([] when they are), from the query's text (gpu_processes)
    and the server unit's state: the same test plan() makes, for the sweep across nodes."""
    return _held_by(gpu_processes(apps) or [], bool(server_active), service)


def plan(inputs, recorded, processes, server_active, drained, service="sglang-server"):
    """Run, skip (report the recorded verdict) or refuse.

    inputs: inputs_hash() of this run. recorded: the stored {inputs, verdict} ({} when none
    or not root's). processes: gpu_processes() (None: nvidia-smi did not say; the unit's
    state decides alone). server_active: the server unit is active. drained: the worker is
    out of the routers (rolling_update's drained mark).
    Returns {action, reason, verdict} (verdict: the recorded one for skip, else None)."""
    recorded = recorded if isinstance(recorded, dict) else {}
    held = _held_by(processes or [], bool(server_active), service)
    verdict = recorded.get("verdict") if isinstance(recorded.get("verdict"), dict) else None
    same = bool(verdict) and recorded.get("inputs") == inputs
    if not held:
        return {"action": RUN, "reason": "nothing holds the GPUs", "verdict": None}
    held_text = "; ".join(held)
    if same:
        return {
            "action": SKIP,
            "reason": (
                f"not re-run: the GPUs are held ({held_text}) and the sweep's inputs "
                f"(topology, NCCL version, env) are those of the recorded verdict"
            ),
            "verdict": verdict,
        }
    if not verdict:
        # A host that served before this release (or whose record is gone): nothing to
        # compare against, and nothing wrong found; the sweep waits for free GPUs.
        return {
            "action": DEFER,
            "reason": (
                f"not run: the GPUs are held ({held_text}) and no verdict is recorded yet; "
                f"the sweep runs on the first provision with {service} stopped"
            ),
            "verdict": None,
        }
    # Drained or not, a server that still runs holds its memory (--mem-fraction-static):
    # the sweep never runs beside it.
    changed = "changed since the recorded verdict"
    if drained:
        held_text += "; drained, but its server still runs"
    return {
        "action": REFUSE,
        "reason": (
            f"the sweep's inputs (topology, NCCL version, env) {changed} and the GPUs are "
            f"held ({held_text}): a sweep beside the server runs out of memory or measures a "
            f"loaded link. Stop {service} on this host (a routed worker: `gpuhost update` "
            f"drains it) and run again, or set nccl_verify: false"
        ),
        "verdict": None,
    }
