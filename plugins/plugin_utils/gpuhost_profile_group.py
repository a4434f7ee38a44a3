# Copyright: gpuhost contributors
# Apache-2.0
"""The serving group on the profile side (issue 30): one SGLang server across several hosts.

The group itself (ranks, --dist-init-addr, members' addresses) is decided once, in
gpuhost_serving_group.of_host, and reaches the profile action as `sglang_server_serving_group`.
This file decides what the profile makes of it, before any change:

- `flags_of`: the group's three SGLang flags for this host (--nnodes, --node-rank,
  --dist-init-addr), which join the effective flags the rules and the argv see; none of them
  may come from sglang_server_flags or a profile (gpuhost_profile_flags.RESERVED);
- `nodes_problem`: a profile is sized for `nodes` hosts (default 1) and serves only a group
  of that many (a host alone is a group of 1);
- `peers`: the port rule admits only sglang_server_firewall_cidrs, so every other node's
  group address must be inside them, or the nodes cannot reach this node's ports.

Pure: dicts in, message lines and findings out. Controller-only (plugin_utils).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed

_finding = prefixed("sglang_server.")

# The flags the group renders, in the order they go on the command line.
GROUP_FLAGS = ("--nnodes", "--node-rank", "--dist-init-addr")
# HOST:PORT as gpuhost_serving_group.dist_init_addr writes it: a name or IPv4, or [IPv6].
_ADDR = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})):\d{1,5}")


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def size(group):
    """How many hosts the server spans: the group's nnodes, 1 for a host alone."""
    return _int((group or {}).get("nnodes")) or 1


def flags_of(group):
    """({flag: value} for this host, [problems]) from sglang_server_serving_group ({} alone).

    The values were decided and checked by gpuhost_serving_group; this checks their shape
    once more, as everything rendered into argv is, naming the derived variable."""
    if not group:
        return {}, []
    if not isinstance(group, dict) or not isinstance(group.get("flags"), dict):
        return {}, [
            f"sglang_server_serving_group: got {group!r}; allowed: {{}} (a host alone) or the "
            "mapping gpuhost.gpu.serving_group derives from the inventory"
        ]
    flags = group["flags"]
    nnodes, rank, addr = (flags.get(f) for f in GROUP_FLAGS)
    problems = []
    if _int(nnodes) is None or nnodes < 2:
        problems.append(f"--nnodes {nnodes!r}; allowed: an integer >= 2")
    elif _int(rank) is None or not 0 <= rank < nnodes:
        problems.append(f"--node-rank {rank!r}; allowed: an integer 0..{nnodes - 1}")
    if not isinstance(addr, str) or not _ADDR.fullmatch(addr):
        problems.append(f"--dist-init-addr {addr!r}; allowed: HOST:PORT (IPv6 as [ADDR]:PORT)")
    if problems:
        name = group.get("name", "?")
        return {}, [
            f"sglang_server_serving_group (group {name}): {p}, as gpuhost.gpu.serving_group "
            "derives it from sglang_server_group and its settings"
            for p in problems
        ]
    return {f: flags[f] for f in GROUP_FLAGS}, []


def profile_nodes(doc):
    """The hosts a profile file is sized for: its `nodes`, 1 when it says none."""
    return _int((doc or {}).get("nodes")) or 1


def _where(group):
    if not group:
        return 'this host serves alone (sglang_server_group is "")'
    members = ", ".join(group["members"])
    return f"sglang_server_group {group['name']!r} has {size(group)} hosts ({members})"


def nodes_problem(name, doc, group, library=()):
    """The refusal when profile `name` (its file's mapping `doc`) is sized for another number
    of hosts than this server spans, else None. `library`: [(name, doc)] of the profiles, to
    name those sized for this group."""
    want, have = profile_nodes(doc), size(group)
    if want == have:
        return None
    sized = [n for n, d in library if isinstance(d, dict) and profile_nodes(d) == have]
    others = ", ".join(sized) if sized else f"none in the library is sized for {have} host(s)"
    if have == 1:
        way = (
            f"put {want} hosts with the same GPUs in one sglang_server_group (docs/multi-node.md), "
            f"or a profile for one host ({others}; sglang_server_profile: auto picks one)"
        )
    else:
        way = (
            f"a group of {want} hosts, or a profile with nodes: {have} ({others}), or "
            "sglang_server_profile '' with sglang_server_model_id and sglang_server_tp_size "
            f"(TP x PP split over the {have} hosts)"
        )
    return (
        f"sglang_server_profile: got {name!r}, a profile sized for {want} host(s) (its nodes: "
        f"{want}: TP and memory are split over that many); {_where(group)}; allowed: {way}"
    )


def _networks(cidrs):
    out = []
    for cidr in cidrs or []:
        try:
            out.append(ipaddress.ip_network(str(cidr).strip(), strict=False))
        except ValueError:
            continue  # refused before this by role sglang_server's constraints (ip: network)
    return out


def peers(group, cidrs):
    """Is every other node of the group admitted by the port rule? Returns
    {errors, warnings, findings}: an error per node whose group address (an IP) is outside
    every network of sglang_server_firewall_cidrs, naming the fix; a warning per node given
    by host name (a rule holds networks, so the name cannot be checked here)."""
    out = {"errors": [], "warnings": [], "findings": []}
    if not group:
        return out
    me = group["members"][group["rank"]]
    networks = _networks(cidrs)
    missing, named, covered = [], [], []
    for host in group["members"]:
        if host == me:
            continue
        addr = str(group.get("addresses", {}).get(host, "")).strip()
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            named.append((host, addr))
            continue
        if any(n.version == ip.version and ip in n for n in networks):
            covered.append(host)
        else:
            missing.append((host, ip))
    name, port = group["name"], group.get("port")
    for host, ip in missing:
        out["errors"].append(
            f"sglang_server_firewall_cidrs: got {list(cidrs or [])!r}; {host}, a node of group "
            f"{name} at {ip} (its sglang_server_group_address), is outside all of them, and "
            f"the port rule admits only those networks to this server's ports (the API port, "
            f"torch.distributed's and the --dist-init-addr port {port}); allowed: networks "
            f"that hold every node of the group: add {ip}/{ip.max_prefixlen} (or the network "
            "the nodes share)"
        )
    for host, addr in named:
        out["warnings"].append(
            f"sglang_server_group_address of {host} (group {name}) is the host name {addr!r}: "
            "the port rule holds networks, so sglang_server_firewall_cidrs must cover the "
            "address it resolves to, and that cannot be checked here; set "
            "sglang_server_group_address to its IP to have it checked"
        )
    if missing:
        host, ip = missing[0]
        out["findings"].append(
            _finding(
                "group_peers",
                "fail",
                f"{len(missing)} node(s) of group {name} outside sglang_server_firewall_cidrs: "
                f"{host} at {ip}",
                f"add {ip}/{ip.max_prefixlen} to sglang_server_firewall_cidrs",
            )
        )
    elif named:
        out["findings"].append(
            _finding(
                "group_peers",
                "warn",
                f"{len(named)} node(s) of group {name} given by host name, not checked "
                f"against sglang_server_firewall_cidrs: {', '.join(h for h, _ in named)}",
                "set sglang_server_group_address to an IP, inside sglang_server_firewall_cidrs",
            )
        )
    else:
        out["findings"].append(
            _finding(
                "group_peers",
                "pass",
                f"every other node of group {name} is inside sglang_server_firewall_cidrs: "
                f"{', '.join(covered)}",
            )
        )
    return out
