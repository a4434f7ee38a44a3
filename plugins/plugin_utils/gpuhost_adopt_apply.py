# Copyright: gpuhost contributors
# Apache-2.0
"""The decisions of `gpuhost adopt --apply` (issue 31 item 3; docs/adopt.md), pure.

- targets: which hosts go on (exactly one hand-started server found) and which are refused,
  before anything changes;
- STEPS: the order of the cutover, the one place it is written (the playbook
  playbooks/adopt_apply.yml follows it, tests/test_adopt_apply.py holds the two together);
- from_proposal: which settings the proposal sets over the inventory's (the proposal file is
  loaded over the inventory, then everything is validated);
- clients: what the clients of the old server must change, from the proposal's listen
  decision and the settings the run validated;
- outcome: the report of one host (cut over, or brought back after a failed gate).
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import is_loopback
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_adopt import SERVER_PORT, SGLANG_HOST

# The order of the cutover. Everything before "stop" runs beside the old server and needs no
# GPU; "stop" is as late as it can be; "restore" runs only when "gate" failed.
STEPS = (
    "validate",  # the proposal over the inventory, every setting, before any change
    "converge",  # base, python_env, nccl without its sweep, model_cache (adopt first), unit files
    "record",  # the old process from /proc, now: argv, environ (root-only file), cwd, uid/gid
    "stop",  # SIGTERM, SIGKILL after the timeout, GPU memory free
    "start",  # the managed unit
    "gate",  # the role's own health gate
    "restore",  # only after a failed gate: the managed unit stopped, the old command again
)


class ApplyError(ValueError):
    """--apply cannot go on; the message names the hosts and why."""


def targets(found: dict[str, list[dict]]) -> tuple[dict[str, dict], dict[str, str]]:
    """found: {host: [proposal, ...]} from `gpuhost adopt`. Returns ({host: its one proposal},
    {host: why it is refused}): a host with no server or more than one is refused."""
    ok, refused = {}, {}
    for host, proposals in sorted(found.items()):
        if len(proposals) == 1:
            ok[host] = proposals[0]
        elif not proposals:
            refused[host] = "no hand-started SGLang server found"
        else:
            pids = ", ".join(str(p["pid"]) for p in proposals)
            refused[host] = (
                f"{len(proposals)} hand-started SGLang servers (pids {pids}); --apply adopts one: "
                "stop the others, or --limit to a host with one"
            )
    return ok, refused


def refusal(refused: dict[str, str]) -> str:
    return "gpuhost adopt --apply: nothing was changed; refused on " + "; ".join(
        f"{host}: {why}" for host, why in sorted(refused.items())
    )


def server(servers: list[dict], pid: int) -> dict:
    """The server the proposal was made of, found again at apply time: the same pid, the same
    (redacted) argv as the proposal's run saw is checked on the host (sglang_adopt)."""
    for found in servers or []:
        if int(found.get("pid", -1)) == int(pid):
            return found
    now = ", ".join(str(s.get("pid")) for s in servers or []) or "none"
    raise ApplyError(
        f"pid {pid}: the server the proposal was made of is not running any more (servers "
        f"now: {now}); nothing was stopped: run gpuhost adopt --apply again"
    )


def old_listen(found: dict) -> dict:
    """{host, port, api_key_set, health_url} of a discovered server, with SGLang's
    defaults; health_url: where the host itself reaches its /health (a wildcard listener on
    loopback)."""
    flags = dict((name, value) for name, value in found.get("flags") or [])
    host = str(flags.get("--host", SGLANG_HOST))
    port = int(flags.get("--port", SERVER_PORT))
    reach = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    reach = f"[{reach}]" if ":" in reach else reach
    return {
        "host": host,
        "port": port,
        "api_key_set": "--api-key" in flags,
        "health_url": f"http://{reach}:{port}/health",
    }


def from_proposal(proposal: dict, inventory: dict) -> list[dict]:
    """Each setting the proposal sets, with the inventory's value it replaces (absent: none)."""
    out = []
    for name, value in sorted((proposal or {}).items()):
        row = {"name": name, "value": value}
        if name in inventory and inventory[name] != value:
            row["replaces"] = inventory[name]
        out.append(row)
    return out


def clients(old: dict, new: dict) -> list[str]:
    """What the clients of the old server must change. old: {host, port, api_key_set} of the
    old listener (the proposal's listen decision); new: {host, port, api_key_set} the
    managed server was validated with."""
    said = []
    if str(old.get("port")) != str(new.get("port")):
        said.append(f"the port: {old.get('port')} -> {new.get('port')}")
    else:
        said.append(f"nothing about the port: {new.get('port')} is kept")
    if is_loopback(str(new.get("host"))) and not is_loopback(str(old.get("host"))):
        said.append(
            f"the address: the server listens on {new.get('host')} only; clients on other "
            "machines go through the router (docs/router.md)"
        )
    if new.get("api_key_set") and not old.get("api_key_set"):
        said.append(
            "the key: every request now needs 'Authorization: Bearer <sglang_server_api_key>' "
            "(the old listener took none)"
        )
    elif new.get("api_key_set"):
        said.append("nothing about the key, when sglang_server_api_key is the key the old server had")
    return said
