# Copyright: gpuhost contributors
# Apache-2.0
"""NCCL across the nodes of a serving group (issue 30): pure decisions of role nccl.

A group member (`sglang_server_serving_group` not {}) runs NCCL between hosts, so:

- `interface_findings`: the interface named by NCCL_SOCKET_IFNAME (nccl_env_overrides; the
  profile side refuses `lo` with --nnodes) must exist on the host and carry the host's
  `sglang_server_group_address` when that is an IP; without an InfiniBand/RoCE device the
  traffic across the nodes goes over TCP sockets on it (a warning with the bandwidth to
  expect);
- `across_plan`: whether the all-reduce across the nodes runs now (every member in the play,
  nccl_verify on, torch there, the GPUs free on every member: all or none, since one
  missing node makes the others wait);
- `across_evaluate`: one node's result of that all-reduce against
  `nccl_across_min_busbw_gbps`, with a diagnosis naming the node and the transport.

Sources (roles/nccl/README.md "Across nodes"): NCCL docs, Environment Variables,
NCCL_SOCKET_IFNAME (prefix list, `^` excludes, `=` exact) and NCCL_IB_* ; nccl-tests
doc/PERFORMANCE.md (bus bandwidth is comparable to the link's speed).
"""

from __future__ import annotations

import ipaddress

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_rules as rules
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_verify as verify

_finding = prefixed("nccl.group.")
RUN, SKIP = "run", "skip"
SRC = (
    "NCCL docs, Environment Variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_DISABLE), "
    "docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
)
# NCCL's own choice when NCCL_SOCKET_IFNAME is unset: any interface but docker* and lo*.
_NCCL_DEFAULT_IFNAME = "^docker,lo"


def matching(spec, names):
    """The interface names NCCL_SOCKET_IFNAME `spec` selects, in `names` order: a
    comma-separated list of prefixes; a leading `^` selects the names matching none of them;
    a leading `=` (after any `^`) makes them exact names (NCCL docs, NCCL_SOCKET_IFNAME)."""
    text = str(spec if spec is not None else _NCCL_DEFAULT_IFNAME)
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    items = [i.strip() for i in text.split(",") if i.strip()]

    def hit(name):
        return any(name == i if exact else name.startswith(i) for i in items)

    return [n for n in names if hit(n) != exclude]


def _ip(text):
    try:
        return ipaddress.ip_address(str(text).split("%")[0])
    except ValueError:
        return None


def expected_socket_gbps(speed_mbps):
    """Bus bandwidth (GB/s) an all-reduce can reach over a link of `speed_mbps` (Mb/s): the
    link's speed in bytes (nccl-tests doc/PERFORMANCE.md: busbw is comparable to the
    bottleneck link's bandwidth). None when the speed is unknown."""
    if not isinstance(speed_mbps, int) or isinstance(speed_mbps, bool) or speed_mbps <= 0:
        return None
    return round(speed_mbps / 8000.0, 2)


def _socket_text(ifname, speed_mbps):
    expect = expected_socket_gbps(speed_mbps)
    shown = f"{expect:g} GB/s ({speed_mbps} Mb/s link)" if expect else "the link's speed / 8"
    return (
        f"over TCP sockets on {ifname} (NCCL's NET/Socket transport): expect ~{shown} at "
        "most, far below NVLink inside a node (332 GB/s on 2x H200, docs/reference.md "
        "section 4); with InfiniBand or RoCE NCCL uses "
        "NET/IB (RDMA, GPUDirect where the NIC and GPU allow) at the NIC's line rate"
    )


def interface_findings(host, group, ifname, interfaces, address, ib_present):
    """`nccl.group.interface` and `nccl.group.transport` for a group member.

    ifname: the NCCL_SOCKET_IFNAME of the host's env (None: unset, NCCL picks).
    interfaces: {name: {"addresses": [ip, ...] or None, "speed_mbps": int or None}} as the
    host read them (None: not read). address: the host's sglang_server_group_address.
    ib_present: /sys/class/infiniband has a device (None: not read)."""
    name = group.get("name", "?") if isinstance(group, dict) else str(group)
    var = f"nccl_env_overrides.{rules.SOCKET_IFNAME}"
    out = []
    speed, used = None, ifname
    if interfaces is None:
        out.append(
            _finding(
                "interface",
                "warn",
                f"{host} (group {name}): the host's interfaces were not read; "
                f"{rules.SOCKET_IFNAME}={ifname} not checked",
                "run the nccl role again once the service account exists",
            )
        )
    else:
        names = sorted(interfaces)
        chosen = [n for n in matching(ifname, names) if not n.startswith("lo")]
        ip = _ip(address)
        carriers = [
            n
            for n in names
            if ip is not None and any(_ip(a) == ip for a in interfaces[n].get("addresses") or [])
        ]
        hint = f"={carriers[0]}" if carriers else "the interface the other nodes reach it on"
        if not chosen:
            out.append(
                _finding(
                    "interface",
                    "fail",
                    f"{var}: got {ifname!r} on {host} (group {name}): no interface of the "
                    f"host but loopback matches it; the host has {', '.join(names) or 'none'}",
                    f"set {var} to {hint} (NCCL_SOCKET_IFNAME: prefixes, ^ excludes, = exact)",
                )
            )
        elif ip is not None and carriers and not set(carriers) & set(chosen):
            out.append(
                _finding(
                    "interface",
                    "fail",
                    f"{var}: got {ifname!r} on {host} (group {name}): it selects "
                    f"{', '.join(chosen)}, but sglang_server_group_address {address} is on "
                    f"{', '.join(carriers)}; the host has {', '.join(names)}",
                    f"set {var} to {hint}, the interface the other nodes reach {host} on",
                )
            )
        elif ip is not None and not carriers:
            out.append(
                _finding(
                    "interface",
                    "warn",
                    f"{host} (group {name}): {rules.SOCKET_IFNAME}={ifname} selects "
                    f"{', '.join(chosen)}; sglang_server_group_address {address} is on no "
                    "interface of the host (NAT or a floating address?)",
                    "set sglang_server_group_address to the host's own address on the "
                    "network the nodes share",
                )
            )
        else:
            where = (
                f", which carries {address}" if carriers else f" ({address}: a name, not checked)"
            )
            out.append(
                _finding(
                    "interface",
                    "pass",
                    f"{host} (group {name}): {rules.SOCKET_IFNAME}={ifname} selects "
                    f"{', '.join(chosen)}{where}",
                )
            )
        pick = (set(carriers) & set(chosen)) or set(chosen)
        speeds = [interfaces[n].get("speed_mbps") for n in sorted(pick)]
        speed = next((s for s in speeds if isinstance(s, int) and s > 0), None)
        used = ", ".join(sorted(pick)) or ifname
    if ib_present is None:
        out.append(
            _finding(
                "transport",
                "warn",
                f"{host} (group {name}): /sys/class/infiniband not read: the transport "
                "across the nodes is unknown",
                "run preflight (gpuhost_host.ib_present)",
            )
        )
    elif ib_present:
        out.append(
            _finding(
                "transport",
                "pass",
                f"{host} (group {name}): an InfiniBand/RoCE device is present: NCCL uses "
                "NET/IB across the nodes (NCCL_IB_HCA selects the device)",
            )
        )
    else:
        out.append(
            _finding(
                "transport",
                "warn",
                f"{host} (group {name}): no InfiniBand/RoCE device (/sys/class/infiniband "
                f"is empty): traffic across the nodes goes {_socket_text(used, speed)}",
                f"for a model split across nodes use an RDMA NIC (InfiniBand or RoCE); {SRC}",
            )
        )
    return out


def across_plan(group, play_hosts, states, check_mode=False):
    """Whether the all-reduce across the nodes runs on this run, the same answer on every
    member. states: {member: {"verify", "torch", "gpus", "held": [reasons]} or None (not
    read: the member did not get that far)}. Returns {action, reason, nproc}."""
    name = group.get("name", "?")
    members = list(group.get("members") or [])

    def skip(reason):
        return {"action": SKIP, "reason": f"group {name}: {reason}", "nproc": 0}

    if check_mode:
        return skip("check mode: the all-reduce across the nodes only runs for real")
    missing = [m for m in members if m not in (play_hosts or [])]
    if missing:
        return skip(
            f"not every node is in this play (missing {', '.join(missing)}): the all-reduce "
            f"across the nodes needs all {len(members)}"
        )
    states = states or {}
    unread = [m for m in members if not isinstance(states.get(m), dict)]
    if unread:
        return skip(f"not read on {', '.join(unread)}")
    off = [m for m in members if not states[m].get("verify")]
    if off:
        return skip(f"nccl_verify is false on {', '.join(off)}")
    bare = [m for m in members if not states[m].get("torch")]
    if bare:
        return skip(f"no torch at nccl_verify_python on {', '.join(bare)}")
    counts = {m: states[m].get("gpus") for m in members}
    if len(set(counts.values())) != 1 or not all(
        isinstance(c, int) and c > 0 for c in counts.values()
    ):
        shown = ", ".join(f"{m} {c}" for m, c in counts.items())
        return skip(f"the nodes need the same GPU count, at least one (GPUs: {shown})")
    held = [f"{m}: {'; '.join(states[m]['held'])}" for m in members if states[m].get("held")]
    if held:
        return skip(
            f"the GPUs are held ({' | '.join(held)}); the all-reduce across the nodes runs "
            "with every node's server stopped"
        )
    return {
        "action": RUN,
        "reason": f"group {name}: every node is here with free GPUs",
        "nproc": counts[members[0]],
    }


def across_evaluate(host, group, result, threshold_gbps, ifname, ib_present, speed_mbps=None):
    """One node's view of the all-reduce across the nodes (the sweep's JSON in multi-node
    mode) -> {status, message, diagnosis, peak_busbw_gbps, transport}."""
    name = group.get("name", "?")
    where = (
        f"{host} (node {group.get('rank', '?')} of group {name}, {group.get('nnodes', '?')} nodes)"
    )
    runs = (result or {}).get("runs") or []
    run = runs[0] if runs else {}
    parsed = verify.parse_nccl_log(run.get("nccl_log") or [])
    transport = (
        ", ".join(sorted(k for k in parsed["via"] if k.upper().startswith("NET")))
        or (parsed["transport"])
    )
    path = "over InfiniBand/RoCE (NET/IB)" if ib_present else _socket_text(ifname, speed_mbps)
    error = (result or {}).get("error") or run.get("error")
    if error or not run.get("ok", False):
        return {
            "status": "fail",
            "message": (
                f"NCCL all-reduce across the nodes FAILED on {where}: {error or 'no result'}"
            ),
            "diagnosis": (
                "a node that never joined: is the sweep running on every node, and does the "
                f"firewall let the nodes reach {group.get('dist_init_addr', '?')} and each "
                f"other's ephemeral ports on {ifname}?"
            ),
            "peak_busbw_gbps": 0.0,
            "transport": transport,
        }
    wrong = [r["bytes"] for r in run.get("rows") or [] if not r.get("correct")]
    peak = verify.peak_busbw(run)
    if not run.get("rows"):
        peak = 0.0
    elif peak == 0.0:
        peak = max(r["busbw_gbps"] for r in run["rows"])
    shown = f"peak busbw {peak:.2f} GB/s, threshold {float(threshold_gbps):g} GB/s"
    if wrong:
        status, why = "fail", f"wrong sums at {', '.join(str(b) for b in wrong)} bytes"
    elif peak < float(threshold_gbps):
        status, why = "fail", shown
    else:
        status, why = "pass", shown
    diagnosis = (
        ""
        if status == "pass"
        else (
            f"{where}: {why}; NCCL used {transport}; traffic across the nodes goes {path}. Below "
            "the link's expectation look at the interface (NCCL_SOCKET_IFNAME), its MTU and "
            "competing traffic; lower nccl_across_min_busbw_gbps only if the link is that slow"
        )
    )
    return {
        "status": status,
        "message": f"NCCL all-reduce across the nodes {status.upper()} on {where}: {why} "
        f"({transport})",
        "diagnosis": diagnosis,
        "peak_busbw_gbps": peak,
        "transport": transport,
    }


def across_findings(verdict, skipped=""):
    """`nccl.group.across` for gpuhost_findings."""
    if not verdict:
        return [
            _finding(
                "across",
                "warn",
                f"all-reduce across the nodes not run: {skipped}",
                "run the nccl role on every node of the group with the servers stopped",
            )
        ]
    failed = verdict["status"] == "fail"
    return [
        _finding(
            "across",
            "fail" if failed else "pass",
            verdict["message"],
            verdict.get("diagnosis", "") if failed else "",
        )
    ]
