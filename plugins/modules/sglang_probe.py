#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Probe the SGLang server once: unit state, port, /health, /v1/models, a correctness query."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.sglang_probe
short_description: One look at the SGLang server (systemd state and its HTTP contract)
description:
  - Reads the unit's state from systemd, then follows SGLang's start-up contract
    (docs/reference.md §3) as far as it goes - port open, C(/health) 200,
    C(/v1/models) listing the served name - and optionally asks a correctness question.
  - Never changes anything. The controller-side action C(gpuhost.gpu.sglang_wait) calls it in a
    loop and prints the progress.
options:
  service:
    description: systemd unit name without .service.
    type: str
    required: true
  host:
    description: Address to connect to (the listen address; a wildcard means loopback).
    type: str
    default: 127.0.0.1
  port:
    description: Server port.
    type: int
    required: true
  served_model_name:
    description: Name /v1/models must list.
    type: str
    required: true
  api_key:
    description: Bearer key for /v1/*; never logged.
    type: str
    default: ""
  correctness:
    description: Ask the question when the server is healthy.
    type: bool
    default: false
  prompt:
    description: The question.
    type: str
    default: "What is 17 + 25? Reply with the number only."
  expect:
    description: Value the answer must contain as a whole value (C(42) is not found in
      C(420)); the same check C(gpuhost verify) applies.
    type: str
    default: "42"
  max_tokens:
    description: Tokens the answer may use.
    type: int
    default: 1024
  node_rank:
    description: >-
      The server's node rank in a serving group (C(--node-rank)); 0 for a server of its own.
      A rank >= 1 serves only SGLang's dummy C(/health), C(/ping) and C(/health_generate),
      which it starts once its schedulers joined the group and loaded their part of the
      model; it passes as C(joined) when C(/health) answers 200 and C(/v1/models) does not
      list the served name (rank 0 serves that).
    type: int
    default: 0
  request_timeout:
    description: Seconds per HTTP request (the correctness query gets 10x).
    type: int
    default: 5
author: gpuhost
"""

RETURN = r"""
phase:
  description: >-
    inactive | failed | exited | port_closed | warming | unhealthy | models_missing |
    healthy | correct | wrong; for a rank >= 1: joined | standalone
  type: str
  returned: always
active_state: {description: systemd ActiveState., type: str, returned: always}
sub_state: {description: systemd SubState., type: str, returned: always}
main_pid: {description: MainPID (0 when none)., type: int, returned: always}
n_restarts: {description: NRestarts., type: int, returned: always}
detail: {description: One human line about the phase., type: str, returned: always}
last_log: {description: Last line the unit wrote to the journal., type: str, returned: always}
answer:
  description: The correctness reply (content and reasoning).
  type: str
  returned: when asked
"""

import socket  # noqa: E402 - after the doc blocks

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_api import (  # noqa: E402
    WILDCARDS,
    ApiError,
    Client,
    base_url,
    contains_expected,
    first_message,
    reply_text,
)


def unit_state(module, service):
    props = "ActiveState,SubState,MainPID,NRestarts,Result,ExecMainStatus,LoadState"
    rc, out, _ = module.run_command(["systemctl", "show", f"{service}.service", "-p", props])
    state = {}
    if rc == 0:
        for line in out.splitlines():
            key, _, value = line.partition("=")
            state[key] = value
    return state


def last_log(module, service):
    rc, out, _ = module.run_command(
        ["journalctl", "-u", f"{service}.service", "-n", "1", "-o", "cat", "--no-pager"]
    )
    return out.strip().splitlines()[-1][:200] if rc == 0 and out.strip() else ""


def http_phase(p):
    """(phase, detail, extra) of a running unit's server, following SGLang's start-up contract:
    port open, /health 200, /v1/models lists the name, then (when asked) the correctness query,
    judged by the whole-value check `gpuhost verify` applies ("42" is not found in "420")."""
    host = "127.0.0.1" if p["host"] in WILDCARDS else p["host"]
    try:
        with socket.create_connection((host, p["port"]), timeout=p["request_timeout"]):
            pass
    except OSError:
        why = f"port {p['port']} closed (loading weights, KV cache, CUDA graphs)"
        if p["node_rank"] >= 1:
            # SGLang opens a rank >= 1's port only after its schedulers joined rank 0.
            why = (
                f"port {p['port']} closed: rank {p['node_rank']} has not joined its group's "
                "rank 0 (still loading, or it cannot reach rank 0's --dist-init-addr)"
            )
        return "port_closed", why, {}

    client = Client(base_url(host, p["port"]), p["api_key"], p["request_timeout"])
    try:
        status = client.health()
    except ApiError:
        status = 0
    if status == 503:
        return "warming", "/health answers 503 (warming up)", {}
    if status != 200:
        return "unhealthy", f"/health answered {status or 'nothing'}", {}
    try:
        status, names = client.models()
    except ApiError:
        status, names = 0, []
    if p["node_rank"] >= 1:
        return rank_phase(p, status, names)
    if p["served_model_name"] not in names:
        return (
            "models_missing",
            f"/v1/models answered {status} without {p['served_model_name']!r} (lists {names})",
            {},
        )
    if not p["correctness"]:
        return "healthy", f"/health 200 and /v1/models lists {p['served_model_name']!r}", {}

    answer, body = "", ""
    try:
        message, _ = first_message(
            client.chat(
                p["served_model_name"],
                p["prompt"],
                p["max_tokens"],
                timeout=p["request_timeout"] * 10,
            )
        )
        answer, status = reply_text(message), 200
    except ApiError as exc:
        body, status = str(exc), 0
    if answer and contains_expected(answer, p["expect"]):
        return (
            "correct",
            f"asked {p['prompt']!r}, the reply contains {p['expect']!r}",
            {"answer": answer[:300]},
        )
    return (
        "wrong",
        f"asked {p['prompt']!r}: expected {p['expect']!r} in the reply, got "
        + (f"HTTP 200: {answer[:200]!r}" if status == 200 else body[:200]),
        {"answer": answer[:300]},
    )


def rank_phase(p, status, names):
    """A rank >= 1 of a serving group after /health 200 (SGLang's engine.py starts its dummy
    health server only after the schedulers are ready): joined, unless it also lists the
    served name, which only a server of its own does (a wrong --node-rank or --nnodes)."""
    if p["served_model_name"] in names:
        return (
            "standalone",
            f"rank {p['node_rank']} answered /v1/models with {p['served_model_name']!r}: it "
            "serves on its own, not as a node of its group (check --nnodes and --node-rank)",
            {},
        )
    return (
        "joined",
        f"rank {p['node_rank']}: /health 200 (its schedulers joined the group; rank 0 serves "
        f"/v1/models, here {status or 'nothing'})",
        {},
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            service=dict(type="str", required=True),
            host=dict(type="str", default="127.0.0.1"),
            port=dict(type="int", required=True),
            served_model_name=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            correctness=dict(type="bool", default=False),
            prompt=dict(type="str", default="What is 17 + 25? Reply with the number only."),
            expect=dict(type="str", default="42"),
            max_tokens=dict(type="int", default=1024),
            node_rank=dict(type="int", default=0),
            request_timeout=dict(type="int", default=5),
        ),
        supports_check_mode=True,
    )
    p = module.params
    state = unit_state(module, p["service"])
    result = dict(
        changed=False,
        active_state=state.get("ActiveState", "unknown"),
        sub_state=state.get("SubState", "unknown"),
        main_pid=int(state.get("MainPID") or 0),
        n_restarts=int(state.get("NRestarts") or 0),
        last_log=last_log(module, p["service"]),
    )

    def done(phase, detail, **extra):
        result.update(phase=phase, detail=detail, **extra)
        module.exit_json(**result)

    active, sub = result["active_state"], result["sub_state"]
    if state.get("LoadState") == "not-found":
        done("inactive", "the unit is not installed")
    if active == "failed":
        done(
            "failed",
            f"the unit failed (result {state.get('Result')}, exit status "
            f"{state.get('ExecMainStatus')})",
        )
    if sub == "auto-restart" or (active == "activating" and result["main_pid"] == 0):
        done(
            "exited",
            f"the server exited (result {state.get('Result')}, exit status "
            f"{state.get('ExecMainStatus')}); systemd restarts it",
        )
    if active != "active":
        done("inactive", f"the unit is {active}/{sub}")

    phase, detail, extra = http_phase(p)
    done(phase, detail, **extra)


if __name__ == "__main__":
    main()
