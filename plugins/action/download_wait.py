# Copyright: gpuhost contributors
# Apache-2.0
"""Action plugin: follow an async download job, printing how many bytes have arrived.

A ~450 GB model takes hours; `async_status` in an `until:` loop would print nothing but
retries. This polls the job (the same call ansible.builtin.async_status makes) and the size of
the target directory (module gpuhost.gpu.path_size) every `interval` seconds and prints
"12.3 GiB of ~480 GiB (2 %), 110 MiB/s". It returns the job's result when it ends and fails
with the tail of its output when the job fails or runs past `timeout`.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase

DOCUMENTATION = r"""
---
action: gpuhost.gpu.download_wait
short_description: Wait for an async download job with byte-count progress
options:
  jid: {type: str, required: true, description: "ansible_job_id of the async task."}
  path: {type: str, required: true, description: "Directory whose size shows progress."}
  expected_bytes: {type: int, default: 0, description: "For a percentage; 0 when unknown."}
  timeout: {type: int, default: 172800}
  interval: {type: int, default: 30}
  label: {type: str}
"""

_GIB = 1 << 30


def _human(n):
    for unit, size in (("GiB", _GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        jid = str(args["jid"])
        path = str(args["path"])
        expected = int(args.get("expected_bytes") or 0)
        timeout = int(args.get("timeout") or 172800)
        interval = max(1, int(args.get("interval") or 30))
        label = args.get("label") or path
        host = (task_vars or {}).get("inventory_hostname", "?")
        async_dir = self._remote_expand_user(
            self.get_shell_option("async_dir", default="~/.ansible_async")
        )

        start = time.monotonic()
        first = last_bytes = None
        last_time = start
        while True:
            job = self._execute_module(
                module_name="ansible.legacy.async_status",
                module_args={"jid": jid, "mode": "status", "_async_dir": async_dir},
                task_vars=task_vars,
            )
            size = self._execute_module(
                module_name="gpuhost.gpu.path_size", module_args={"path": path}, task_vars=task_vars
            )
            now = time.monotonic()
            got = int(size.get("bytes") or 0)
            first = got if first is None else first
            rate = (
                (got - last_bytes) / (now - last_time)
                if last_bytes is not None and now > last_time
                else 0
            )
            share = f" of ~{_human(expected)} ({100 * got / expected:.0f} %)" if expected else ""
            speed = f", {_human(int(rate))}/s" if rate > 0 else ""
            self._display.display(
                f"[{host}] {label}: {_human(got)}{share}{speed}, "
                f"{size.get('incomplete', 0)} file(s) in progress ({now - start:.0f} s)"
            )
            last_bytes, last_time = got, now
            if job.get("finished"):
                tail = "\n".join((job.get("stderr") or "").splitlines()[-15:])
                if job.get("failed") or job.get("rc", 0) != 0:
                    result.update(
                        failed=True,
                        changed=False,
                        rc=job.get("rc"),
                        bytes=got,
                        msg=f"{label}: the download failed (rc {job.get('rc')}); it resumes "
                        f"on the next run. Last output:\n{tail}",
                    )
                    return result
                result.update(
                    changed=True,
                    bytes=got,
                    downloaded_bytes=got - first,
                    elapsed_s=round(now - start, 1),
                    stdout=(job.get("stdout") or "")[-2000:],
                    msg=f"{label}: done, {_human(got)} in the cache",
                )
                return result
            if job.get("failed") and not job.get("started", True):
                result.update(failed=True, changed=False, msg=f"{label}: {job.get('msg')}")
                return result
            if now - start + interval > timeout:
                result.update(
                    failed=True,
                    changed=False,
                    bytes=got,
                    msg=f"{label}: still running after {timeout} s ({_human(got)} so far); "
                    "the next run resumes it",
                )
                return result
            time.sleep(interval)
