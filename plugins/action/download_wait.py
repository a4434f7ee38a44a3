# Copyright: gpuhost contributors
# Apache-2.0
"""Action plugin: follow the model download unit, printing bytes, rate and ETA.

A ~480 GB model takes hours. Every `interval` seconds this reads the state of the transient
systemd unit the download runs in (role model_cache, start.yml) and the size of the target
directory (module gpuhost.gpu.path_size), and prints
"acme/m@main: 12.3 GiB of ~480 GiB (2 %), 110.0 MiB/s, ETA 1h12m, 8 file(s) in progress (2m00s)".
It returns when the unit has ended: the bytes, and when the download started and finished
(the unit's own timestamps, for the run's timeline); it fails with the unit's journal tail
when the download failed, and when it runs past `timeout` (the unit keeps going: the next
run finds it and waits again).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from ansible.plugins.action import ActionBase
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_model_cache as _mc

DOCUMENTATION = r"""
---
action: gpuhost.gpu.download_wait
short_description: Wait for the model download unit with bytes, rate and ETA
options:
  unit: {type: str, required: true, description: "The transient unit (without .service)."}
  path: {type: str, required: true, description: "Directory whose size shows progress."}
  revision:
    type: str
    default: ""
    description: "Count only this revision's files (path_size's revision option): others stay."
  expected_bytes: {type: int, default: 0, description: "For a percentage and ETA; 0 = unknown."}
  timeout: {type: int, default: 172800}
  interval: {type: int, default: 30}
  label: {type: str}
"""

_PROPS = (
    "LoadState,ActiveState,SubState,Result,ExecMainStatus,"
    "ExecMainStartTimestamp,ExecMainExitTimestamp"
)
# Rate over the last few polls: steadier than one interval, quicker than the whole run.
_WINDOW = 6


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False

    def _command(self, argv, task_vars):
        return self._execute_module(
            module_name="ansible.legacy.command",
            module_args={"argv": argv},
            task_vars=task_vars,
        )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        unit = str(args["unit"]) + ".service"
        path = str(args["path"])
        expected = int(args.get("expected_bytes") or 0)
        timeout = int(args.get("timeout") or 172800)
        interval = max(1, int(args.get("interval") or 30))
        label = args.get("label") or path
        revision = str(args.get("revision") or "")
        size_args = {"path": path, **({"revision": revision} if revision else {})}
        host = (task_vars or {}).get("inventory_hostname", "?")

        start = time.monotonic()
        samples = []
        first = None
        while True:
            show = self._command(
                ["systemctl", "show", unit, "--timestamp=utc", "-p", _PROPS], task_vars
            )
            props = _mc.parse_show(show.get("stdout") or "")
            state = _mc.unit_state(props)
            size = self._execute_module(
                module_name="gpuhost.gpu.path_size", module_args=size_args, task_vars=task_vars
            )
            now = time.monotonic()
            got = int(size.get("revision_bytes", size.get("bytes")) or 0)
            first = got if first is None else first
            samples = [*samples[-(_WINDOW - 1) :], (now, got)]
            (t0, b0), (t1, b1) = samples[0], samples[-1]
            rate = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
            line = _mc.progress_line(
                label=label,
                got=got,
                expected=expected,
                rate=rate,
                elapsed=now - start,
                incomplete=int(size.get("incomplete") or 0),
            )
            self._display.display(f"[{host}] {line}")
            timing = {
                "unit": unit,
                "started_at": _mc.parse_timestamp(props.get("ExecMainStartTimestamp", "")),
                "finished_at": _mc.parse_timestamp(props.get("ExecMainExitTimestamp", "")),
                "bytes": got,
                "bytes_this_run": got - first,
                "waited_s": round(now - start, 1),
            }
            if state == "succeeded":
                timing["finished_at"] = timing["finished_at"] or datetime.now(UTC).isoformat(
                    timespec="seconds"
                )
                result.update(
                    changed=True,
                    bytes=got,
                    started_at=timing["started_at"],
                    finished_at=timing["finished_at"],
                    timing=timing,
                    msg=f"{label}: done, {_mc.human(got)} in the cache",
                )
                return result
            if state in ("failed", "absent"):
                journal = self._command(
                    ["journalctl", "-u", unit, "-n", "15", "--no-pager", "-o", "cat"], task_vars
                )
                why = (
                    f"the download failed ({props.get('Result')}, status "
                    f"{props.get('ExecMainStatus')}); it resumes on the next run"
                    if state == "failed"
                    else f"{unit} is gone (stopped from outside?); the next run starts it again"
                )
                result.update(
                    failed=True,
                    changed=False,
                    bytes=got,
                    timing=timing,
                    msg=f"{label}: {why}. Last output:\n{journal.get('stdout') or ''}",
                )
                return result
            if now - start + interval > timeout:
                result.update(
                    failed=True,
                    changed=False,
                    bytes=got,
                    timing=timing,
                    msg=f"{label}: still running after {timeout} s ({_mc.human(got)} so far); "
                    f"{unit} keeps going and the next run waits for it",
                )
                return result
            time.sleep(interval)
