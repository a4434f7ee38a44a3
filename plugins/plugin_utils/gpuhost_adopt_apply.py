# Copyright: gpuhost contributors
# Apache-2.0
"""The decisions of `gpuhost adopt --apply` (issue 31 item 3; docs/adopt.md), pure.

- targets: which hosts go on (exactly one hand-started server found) and which are refused,
  before anything changes;
- STEPS: the order of the cutover, the one place it is written (the playbook
  playbooks/adopt_apply.yml follows it, tests/test_adopt_apply.py holds the two together);
- server: the server the proposal was made of, found again at apply time.

It imports nothing else of the collection: the CLI loads it from a file
(src/gpuhost/plugin_code.py). The old listener and what its clients must change are
gpuhost_adopt_clients.py.
"""

from __future__ import annotations

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
