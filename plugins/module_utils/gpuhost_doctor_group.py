# Copyright: gpuhost contributors
# Apache-2.0
"""`gpuhost doctor` on a host of a serving group (several hosts that are one SGLang server,
`--nnodes N --node-rank R`; docs/multi-node.md).

Rank 0 serves the API: role verify asks it the known questions as on any host. A rank >= 1
serves no API at all: SGLang 0.5.10.post1 (engine.py, `launch_dummy_health_check_server`)
starts there a dummy HTTP server with `/health`, `/ping` and `/health_generate` only, each an
empty 200 once the node has joined the group, and 404 for `/v1/models`. So on a rank >= 1 the
doctor asks exactly those three routes and says whose API this node serves, and never calls a
missing `/v1/models` a fault.

`read_routes` asks the server (through gpuhost_sglang_api.Client); `check_group` decides
(the group and the answers in, findings out), asking only where a rank >= 1 has a server.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import prefixed
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_api import ApiError

finding = prefixed("doctor.")

# What a rank >= 1 serves (SGLang's dummy health server), each 200 when the node is up.
RANK_ROUTES = ("/health", "/ping", "/health_generate")


def read_routes(client):
    """{route: HTTP status, or why there was no answer} for RANK_ROUTES."""
    answers = {}
    for route in RANK_ROUTES:
        try:
            answers[route], _ = client.request("GET", route)
        except ApiError as exc:
            answers[route] = str(exc)
    return answers


def _where(group):
    return (
        f"rank {group['rank']} of group {group['name']}, served by rank 0 {group['rank0']}"
        if group.get("rank")
        else f"rank 0 of group {group['name']} ({group.get('nnodes', '?')} nodes: "
        f"{', '.join(group.get('members') or [])})"
    )


def check_group(group, ask, service="sglang-server", installed=True):
    """Findings for this host's place in its serving group. `group`: the host's
    sglang_server_serving_group ({} alone: no finding); `ask`: called with no argument on a
    rank >= 1 whose server unit is `installed`, returns read_routes()' answers."""
    if not group:
        return []
    where = _where(group)
    if not installed:
        return [
            finding(
                "group",
                "warn",
                f"{where}: no {service} unit here"
                + (", its health routes not asked" if group.get("rank") else ""),
                "gpuhost provision installs it on every node of the group",
            )
        ]
    if not group.get("rank"):
        return [
            finding(
                "group",
                "pass",
                f"{where}: serves the group's API; the known questions are asked here",
            )
        ]
    answers = ask()
    bad = {route: answer for route, answer in answers.items() if answer != 200}
    if not bad:
        return [
            finding(
                "group",
                "pass",
                f"{where}: {', '.join(answers)} answer 200 (a rank >= 1 serves only these; "
                f"the API, /v1/models and the questions are rank 0's, {group['rank0']})",
            )
        ]
    said = "; ".join(
        f"{route} answered {answer}" if isinstance(answer, int) else f"{route}: {answer}"
        for route, answer in bad.items()
    )
    return [
        finding(
            "group",
            "fail",
            f"{where}: {said} (allowed: 200 on each of {', '.join(RANK_ROUTES)})",
            f"a rank >= 1 answers once the whole group has joined rank 0 at "
            f"{group.get('dist_init_addr', '--dist-init-addr')}: journalctl -u {service} here "
            f"and on {group['rank0']} says why",
        )
    ]
