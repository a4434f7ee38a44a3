# Copyright: gpuhost contributors
# Apache-2.0
"""A serving group: several GPU hosts that are one SGLang server (issue 30; not in the roles yet).

SGLang runs a model across nodes with the same command line on every node except
`--node-rank`: `--nnodes N --node-rank R --dist-init-addr HOST:PORT`, where HOST:PORT is where
rank 0 listens for the others (torch.distributed's rendezvous). The decisions here, once for the
roles and the CLI:

- which rank each node is (`ranks`): the inventory order of the group's hosts unless a host
  pins its own (`sglang_server_node_rank`);
- the `--dist-init-addr` value (`dist_init_addr`): rank 0's address on the network the nodes
  share, never loopback;
- whether the nodes can serve one model together (`consistency`): the same GPUs, driver, NCCL,
  venv lock and model revision on every node, as findings naming the odd node out;
- how a rolling update takes the hosts (`batches`): a group is one unit, never split across
  batches, and `--serial` counts units.

Pure functions over plain values; the callers read the inventory and the facts.
"""

from __future__ import annotations

import ipaddress
import json
import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import is_loopback
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_serial import (
    SerialError,
    per_batch,
)

_finding = prefixed("preflight.group.")
_JSON_SORTED = {"sort_keys": True, "separators": (",", ":")}

# A host name or an IPv4/IPv6 address, as it goes into `--dist-init-addr` (argv: nothing else).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
# The facts every node of a group must share, and how each is named in a finding.
SHARED = (
    ("gpu_count", "GPU count"),
    ("gpu_name", "GPU model"),
    ("driver", "NVIDIA driver"),
    ("nccl", "NCCL version"),
    ("venv_lock", "venv lock"),
    ("model", "serving profile and model"),
    ("model_revision", "model revision"),
    ("flags", "SGLang flags (sglang_server_flags)"),
)


class GroupError(ValueError):
    """Bad group settings: the message names the variable, the value and what is allowed."""


__all__ = [
    "GroupError",
    "SerialError",
    "batches",
    "consistency",
    "dist_init_addr",
    "node_facts",
    "of_host",
    "preflight",
    "ranks",
    "reach_findings",
    "reach_targets",
]

# A group's name: it goes into findings, messages and the run record.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def ranks(group: str, members: list[dict]) -> dict[str, int]:
    """{host: node rank} for the group's hosts. `members` in inventory order, each
    {"name", "rank"} with rank -1 (or None) for "by inventory order". Pinned ranks are taken
    first; the others fill the free ranks in inventory order."""
    if len(members) < 2:
        raise GroupError(
            f"sglang_server_group: {group!r} has {len(members)} host(s); allowed: a group of "
            "2 or more hosts that serve one model together (a single host needs no group)"
        )
    count = len(members)
    pinned: dict[int, str] = {}
    for member in members:
        rank = member.get("rank")
        if rank is None or rank == -1:
            continue
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < count:
            raise GroupError(
                f"sglang_server_node_rank: got {rank!r} on {member['name']}; allowed: -1 (by "
                f"inventory order) or 0..{count - 1} (group {group!r} has {count} hosts)"
            )
        if rank in pinned:
            raise GroupError(
                f"sglang_server_node_rank: {rank} on both {pinned[rank]} and {member['name']} "
                f"(group {group!r}); allowed: each rank once"
            )
        pinned[rank] = member["name"]
    free = iter(r for r in range(count) if r not in pinned)
    assignment = {}
    for member in members:
        rank = member.get("rank")
        assignment[member["name"]] = next(free) if rank is None or rank == -1 else rank
    return assignment


def dist_init_addr(group: str, host: str, address: str, port: int) -> str:
    """`--dist-init-addr` for the group: rank 0 (`host`) at `address` (what the other nodes
    reach it at) and `port`."""
    text = str(address or "").strip()
    if not text:
        raise GroupError(
            f"sglang_server_group_address: empty for {host}, rank 0 of group {group!r}; "
            "allowed: the address the other nodes reach it at (an IP or a host name)"
        )
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        ip = None
    if (ip is not None and ip.is_loopback) or is_loopback(text):
        raise GroupError(
            f"sglang_server_group_address: got {text!r} for {host}, rank 0 of group {group!r}; "
            "allowed: an address on the network the nodes share, not loopback (the other "
            "nodes cannot reach it there)"
        )
    if ip is None and not _HOSTNAME.fullmatch(text):
        raise GroupError(
            f"sglang_server_group_address: got {text!r} for {host}; allowed: an IPv4 or IPv6 "
            "address or a host name (letters, digits, '-' and '.')"
        )
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise GroupError(
            f"sglang_server_dist_init_port: got {port!r} (group {group!r}); allowed: 1..65535"
        )
    return f"[{ip}]:{port}" if ip is not None and ip.version == 6 else f"{text}:{port}"


def consistency(group: str, facts: dict[str, dict]) -> list[dict]:
    """Findings: does every node of the group have the same GPUs, driver, NCCL, venv lock and
    model revision? `facts`: {host: {key: value}} with the keys of SHARED; a missing or
    "unknown" value is a warning (not read), a difference a failure naming each value's hosts."""
    found = []
    for key, label in SHARED:
        values: dict[str, list[str]] = {}
        unread = []
        for host in facts:
            value = facts[host].get(key)
            if value in (None, "", "unknown"):
                unread.append(host)
                continue
            values.setdefault(str(value), []).append(host)
        check = f"{group}.{key}"
        if len(values) > 1:
            seen = "; ".join(f"{v} on {', '.join(hosts)}" for v, hosts in sorted(values.items()))
            found.append(
                _finding(
                    check,
                    "fail",
                    f"group {group}: the nodes differ in {label}: {seen}",
                    f"give every node of group {group} the same {label}, then run again",
                )
            )
        elif unread:
            found.append(
                _finding(
                    check,
                    "warn",
                    f"group {group}: {label} not read on {', '.join(unread)}",
                    "run preflight on every node of the group",
                )
            )
        else:
            only = next(iter(values), "none")
            found.append(_finding(check, "pass", f"group {group}: {label} {only} on every node"))
    return found


def batches(hosts: list[str], group_of: dict[str, str], serial) -> tuple[list[str], list[int]]:
    """A rolling update's order and batch sizes (Ansible's `serial` as a list) where the hosts
    of one group are always in the same batch and next to each other, and `serial` (a count
    >= 1 or "N%") counts units: a group or a host on its own. `hosts` in play order; the
    group of a unit comes where its first host is."""
    units: list[list[str]] = []
    index: dict[str, int] = {}
    for host in hosts:
        group = group_of.get(host) or ""
        if group and group in index:
            units[index[group]].append(host)
            continue
        if group:
            index[group] = len(units)
        units.append([host])
    size = per_batch(serial, len(units))
    order = [host for unit in units for host in unit]
    sizes = [
        sum(len(unit) for unit in units[start : start + size])
        for start in range(0, len(units), size)
    ]
    return order, sizes


def of_host(host: str, hostvars) -> dict:
    """The serving group `host` belongs to, as every role and the CLI read it, or {} for a host
    that serves on its own (`sglang_server_group` ""). `hostvars`: {name: {variable: value}}
    over the inventory, in inventory order (Ansible's hostvars iterate so). Returns
    {name, rank, nnodes, members (host names in rank order), rank0, address (rank 0's),
    port, dist_init_addr, addresses ({host: its group address}), flags (the three SGLang
    flags for this host)}."""
    name = str(hostvars[host].get("sglang_server_group") or "")
    if not name:
        return {}
    if not _NAME.fullmatch(name):
        raise GroupError(
            f'sglang_server_group: got {name!r} on {host}; allowed: "" (no group) or a name '
            "of letters, digits, '_', '.' and '-' (at most 63)"
        )
    names = [h for h in hostvars if str(hostvars[h].get("sglang_server_group") or "") == name]
    assigned = ranks(
        name, [{"name": h, "rank": hostvars[h].get("sglang_server_node_rank", -1)} for h in names]
    )
    members = sorted(names, key=assigned.get)
    rank0 = members[0]
    port = hostvars[rank0].get("sglang_server_dist_init_port")
    for member in members[1:]:
        other = hostvars[member].get("sglang_server_dist_init_port")
        if other != port:
            raise GroupError(
                f"sglang_server_dist_init_port: {other!r} on {member} but {port!r} on {rank0} "
                f"(rank 0 of group {name!r}); allowed: the same port on every node of the group"
            )
    addresses = {
        h: str(hostvars[h].get("sglang_server_group_address") or "").strip() for h in members
    }
    addr = dist_init_addr(name, rank0, addresses[rank0], port)
    return {
        "name": name,
        "rank": assigned[host],
        "nnodes": len(members),
        "members": members,
        "rank0": rank0,
        "address": addresses[rank0],
        "port": port,
        "dist_init_addr": addr,
        "addresses": addresses,
        "flags": {
            "--nnodes": len(members),
            "--node-rank": assigned[host],
            "--dist-init-addr": addr,
        },
    }


def node_facts(host_vars) -> dict:
    """The values of SHARED for one node, from its hostvars: this run's GPU facts
    (gpuhost_gpu) and the settings that decide what it serves. NCCL is torch's in the venv:
    the inventory's nccl_version when set, else the lock's."""
    gpu = host_vars.get("gpuhost_gpu") or {}
    gpus = gpu.get("gpus") or [{}]
    driver = (gpu.get("driver") or {}).get("version")
    lock = str(host_vars.get("python_env_lock_file") or "")
    lock = lock or f"lane {host_vars.get('python_env_lane', 'unknown')}"
    model = (
        f"profile {host_vars.get('sglang_server_profile', '')!r}, "
        f"model {host_vars.get('sglang_server_model_id', '')!r}, "
        f"TP {host_vars.get('sglang_server_tp_size', 0)}"
    )
    flags = host_vars.get("sglang_server_flags") or {}
    return {
        "gpu_count": gpu.get("count"),
        "gpu_name": gpus[0].get("name"),
        "driver": driver,
        "nccl": str(host_vars.get("nccl_version") or "") or f"torch's in {lock}",
        "venv_lock": lock,
        "model": model,
        "model_revision": str(host_vars.get("sglang_server_revision") or "") or "the profile's",
        "flags": json.dumps(flags, **_JSON_SORTED),
    }


def preflight(group: dict, hostvars, run_hosts) -> list[dict]:
    """Preflight's findings for a serving group (of_host's dict), before any change: every
    node is in this run (`run_hosts`: the play's hosts) and the nodes agree (consistency)."""
    name = group["name"]
    missing = [h for h in group["members"] if h not in set(run_hosts)]
    found = [
        _finding(
            f"{name}.members",
            "fail" if missing else "pass",
            (
                f"group {name}: {', '.join(missing)} not in this run (a --limit, or failed "
                f"earlier) of its {group['nnodes']} nodes {', '.join(group['members'])}"
            )
            if missing
            else f"group {name}: all {group['nnodes']} nodes in this run, rank 0 {group['rank0']}",
            f"run on every node of group {name} together (--limit {','.join(group['members'])})",
        )
    ]
    present = [h for h in group["members"] if h not in missing]
    return found + consistency(name, {h: node_facts(hostvars[h]) for h in present})


def reach_targets(group: dict, host: str, hostvars) -> list[dict]:
    """What this node of the group must reach, for module group_reach: a rank >= 1 rank 0's
    dist-init port (torch.distributed's rendezvous), rank 0 every other node's server port
    on its group address (the address NCCL's interface carries)."""
    if group["rank"] >= 1:
        return [
            {
                "host": group["rank0"],
                "address": group["address"],
                "port": group["port"],
                "what": "rank 0's dist-init port",
            }
        ]
    return [
        {
            "host": peer,
            "address": group["addresses"][peer],
            "port": int(hostvars[peer].get("sglang_server_port")),
            "what": f"rank {group['members'].index(peer)}'s server port",
        }
        for peer in group["members"][1:]
    ]


def reach_findings(group: dict, host: str, results: list[dict]) -> list[dict]:
    """One finding for this node: every target reached (a connection or a refusal) or not."""
    closed = [r for r in results if not r.get("open")]
    seen = "; ".join(
        f"{r['host']} at {r['address']}:{r['port']} ({r['what']}): {r['detail']}"
        for r in (closed or results)
    )
    check = f"{group['name']}.reach"
    if closed:
        return [
            _finding(
                check,
                "fail",
                f"group {group['name']}: {host} cannot reach {seen}",
                "open the path between the nodes (a firewall or security group between them "
                "drops it), or correct sglang_server_group_address",
            )
        ]
    return [_finding(check, "pass", f"group {group['name']}: {host} reaches {seen}")]
