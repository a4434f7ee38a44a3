# Copyright: gpuhost contributors
# Apache-2.0
"""Action plugin: wait for the SGLang server to come up, printing progress as it goes.

A GLM-5 start takes 7-8 minutes and a first start with FlashInfer JIT longer
(docs/reference.md §3), so a silent `until:` loop would look hung. This runs the
`gpuhost.gpu.sglang_probe` module on the host every `interval` seconds and prints a line
whenever the phase changes (and at least every minute): unit state, port, /health, /v1/models,
then the correctness query. It fails fast when the server process exits or the unit fails,
and otherwise after `timeout` seconds, with the last state and journal line as the cause.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase

DOCUMENTATION = r"""
---
action: gpuhost.gpu.sglang_wait
short_description: Wait with progress until the SGLang server is healthy (and answers correctly)
options:
  service: {type: str, required: true}
  host: {type: str}
  port: {type: int, required: true}
  served_model_name: {type: str, required: true}
  api_key: {type: str, description: "Passed to the probe as a no_log parameter; never returned."}
  correctness: {type: bool, default: true}
  prompt: {type: str}
  expect: {type: str}
  max_tokens: {type: int}
  timeout: {type: int, default: 2700, description: "Seconds until the server must be healthy."}
  timeout_source:
    type: str
    description: Where the timeout comes from (gpuhost_profile.start_timeout), said once.
  interval: {type: int, default: 10}
  label: {type: str, description: "What is being waited for, shown in each line."}
  node_rank:
    type: int
    default: 0
    description: The node rank in a serving group; a rank >= 1 passes as joined (sglang_probe).
"""

_PROBE_ARGS = (
    "service",
    "host",
    "port",
    "served_model_name",
    "api_key",
    "correctness",
    "prompt",
    "expect",
    "max_tokens",
    "node_rank",
)
_FATAL = {"failed", "exited", "inactive", "wrong", "standalone"}
# The phases that pass the gate: a server of its own (or rank 0) healthy or correct, a rank
# >= 1 of a serving group joined.
PASSED = ("healthy", "correct", "joined")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        timeout = int(args.pop("timeout", 2700))
        interval = max(1, int(args.pop("interval", 10)))
        label = args.pop("label", "") or args.get("service", "server")
        source = args.pop("timeout_source", "") or ""
        probe_args = {k: args[k] for k in _PROBE_ARGS if k in args and args[k] is not None}
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"

        if source:
            # A loading server is waited for, not counted dead: say how long and why up front.
            self._display.display(f"[{host}] {label}: waiting up to {timeout} s ({source})")
        start = time.monotonic()
        last_phase, last_shown, polls, probe, restarts = None, 0.0, 0, {}, None
        while True:
            polls += 1
            probe = self._execute_module(
                module_name="gpuhost.gpu.sglang_probe",
                module_args=probe_args,
                task_vars=task_vars,
            )
            elapsed = time.monotonic() - start
            if probe.get("failed"):
                return self._fail(
                    result, f"probe failed: {probe.get('msg')}", probe, elapsed, polls
                )
            phase = probe.get("phase")
            # A crash between two polls shows only as a restart count that went up.
            restarts = probe.get("n_restarts", 0) if restarts is None else restarts
            if probe.get("n_restarts", 0) > restarts:
                probe["phase"] = phase = "exited"
                probe["detail"] = (
                    f"the server exited and systemd restarted it {probe['n_restarts'] - restarts} "
                    "time(s) while waiting"
                )
            if phase != last_phase or elapsed - last_shown >= 60:
                log = f" | log: {probe['last_log']}" if probe.get("last_log") else ""
                self._display.display(
                    f"[{host}] {label}: {probe.get('detail')} ({elapsed:.0f} s of {timeout} s){log}"
                )
                last_phase, last_shown = phase, elapsed
            if phase in PASSED:
                result.update(
                    changed=False,
                    phase=phase,
                    elapsed_s=round(elapsed, 1),
                    polls=polls,
                    main_pid=probe.get("main_pid"),
                    n_restarts=probe.get("n_restarts"),
                    answer=probe.get("answer", ""),
                    msg=f"{label}: {probe.get('detail')} after {elapsed:.0f} s",
                )
                return result
            if phase in _FATAL:
                return self._fail(result, probe.get("detail"), probe, elapsed, polls)
            if elapsed + interval > timeout:
                return self._fail(
                    result,
                    f"not healthy within {timeout} s: {probe.get('detail')}"
                    + (f" (the timeout: {source})" if source else ""),
                    probe,
                    elapsed,
                    polls,
                )
            time.sleep(interval)

    @staticmethod
    def _fail(result, cause, probe, elapsed, polls):
        result.update(
            failed=True,
            changed=False,
            cause=cause,
            phase=probe.get("phase"),
            elapsed_s=round(elapsed, 1),
            polls=polls,
            main_pid=probe.get("main_pid"),
            last_log=probe.get("last_log", ""),
            answer=probe.get("answer", ""),
            msg=cause,
        )
        return result
