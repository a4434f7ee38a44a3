#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
"""Record, stop and restore a hand-started SGLang server (`gpuhost adopt --apply`)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost.gpu.sglang_adopt
short_description: Record, stop or restore a hand-started SGLang server (adopt --apply)
description:
  - C(state=recorded) reads /proc/PID (argv, environment, working directory, uid/gid, where
    stdout goes) now, refuses when the process runs another command than C(argv) (the
    discovered one, secrets redacted), and writes it to C(dir)/pidPID.json, root-only 0600, in
    a root-only 0700 directory. Nothing of the environment and no secret flag value is
    returned.
  - C(state=stopped) sends SIGTERM to the recorded process, SIGKILL to what of its process
    tree is left after C(stop_timeout) seconds, then waits up to C(gpu_timeout) seconds until
    C(nvidia-smi --query-compute-apps=pid) lists none of its pids. A pid whose start time is
    not the recorded one is never signalled.
  - C(state=restored) starts the recorded command again through C(systemd-run) as a transient
    unit C(unit) - as the recorded uid/gid, in its working directory, with its environment
    from C(dir)/pidPID.env (root-only, systemd reads it), its output appended to the file it
    wrote to before (by a shell running as that user) or else to the unit's journal.
  - Check mode reads and changes nothing. The logic is
    C(plugins/module_utils/gpuhost_adopt_cutover.py); docs/adopt.md says how it is used.
options:
  state:
    description: What to do.
    type: str
    choices: [recorded, stopped, restored]
    required: true
  pid: {description: The old server's pid., type: int, required: true}
  argv:
    description: The argv discovery found (secrets redacted); C(recorded) refuses another.
    type: list
    elements: str
    default: []
  dir: {description: The root-only directory of the record., type: path, required: true}
  stop_timeout: {description: Seconds from SIGTERM to SIGKILL., type: int, default: 60}
  gpu_timeout:
    description: Seconds to wait for the GPU memory to be free.
    type: int
    default: 60
  unit:
    description: The transient unit's name (restored).
    type: str
    default: gpuhost-adopt-restore
author: gpuhost contributors
"""

EXAMPLES = r"""
- name: Record the old server
  gpuhost.gpu.sglang_adopt:
    state: recorded
    pid: 4242
    argv: "{{ _server.argv }}"
    dir: /var/lib/gpuhost/adopt
"""

RETURN = r"""
record:
  description: The record without secrets (pid, start_time, argv redacted, cwd, uid, gid,
    output, env_names, env_left_out).
  type: dict
  returned: always
stopped:
  description: (stopped) signal (TERM or KILL, or "" when it was gone), waited_s, gpu (free,
    or why unknown).
  type: dict
  returned: when state is stopped
restored:
  description: (restored) unit, pid (MainPID), output (the file appended to, or the journal).
  type: dict
  returned: when state is restored
"""

import os  # noqa: E402 - after the doc blocks
import re  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuhost.gpu.plugins.module_utils import (  # noqa: E402
    gpuhost_adopt_cutover as cut,
)

_UNIT = re.compile(r"[A-Za-z0-9:_.@-]{1,200}")


def _read(pid, name):
    with open(f"/proc/{pid}/{name}", "rb") as handle:
        return handle.read(1 << 20)


def _alive(pid, start):
    try:
        text = _read(pid, "stat").decode()
    except OSError:
        return False
    state = text.rpartition(")")[2].split()[0]
    return state != "Z" and cut.start_time(text) == start


def _parents():
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                out[int(name)] = int(_read(name, "stat").decode().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def _dir_fd(path, create):
    if create and not os.path.lexists(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    cut.check_dir(os.fstat(fd), path)
    return fd


def _write(dir_fd, name, data):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(data)


def record(module, pid, argv_seen, folder):
    raw_argv = _read(pid, "cmdline").split(b"\0")
    argv = [a.decode("utf-8") for a in (raw_argv[:-1] if raw_argv[-1] == b"" else raw_argv)]
    if argv_seen and cut.public_argv(argv) != list(argv_seen):
        raise cut.CutoverError(
            f"pid {pid} runs {cut.public_argv(argv)} now, not the server found "
            f"({list(argv_seen)}): run gpuhost adopt again"
        )
    pairs = cut.split_environ(_read(pid, "environ"))
    _, left_out = cut.env_file(pairs)
    try:
        output = cut.output_target(os.readlink(f"/proc/{pid}/fd/1"))
    except OSError:
        output = ""
    uid, gid = cut.ids(_read(pid, "status").decode())
    rec = {
        "pid": pid,
        "start_time": cut.start_time(_read(pid, "stat").decode()),
        "argv": argv,
        "environ": pairs,
        "env_left_out": left_out,
        "cwd": os.readlink(f"/proc/{pid}/cwd"),
        "uid": uid,
        "gid": gid,
        "output": output,
    }
    if not module.check_mode:
        fd = _dir_fd(folder, create=True)
        try:
            _write(fd, f"pid{pid}.json", cut.dump(rec))
        finally:
            os.close(fd)
    return rec


def load(pid, folder):
    fd = _dir_fd(folder, create=False)
    try:
        handle = os.open(f"pid{pid}.json", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
        with os.fdopen(handle, "rb") as stream:
            st = os.fstat(stream.fileno())
            if st.st_uid != 0 or st.st_mode & 0o077:
                raise cut.CutoverError(f"{folder}/pid{pid}.json: not root's alone (0600)")
            return cut.load(stream.read())
    finally:
        os.close(fd)


def stop(module, rec, stop_timeout, gpu_timeout):
    pid, began = rec["pid"], time.monotonic()
    if not _alive(pid, rec["start_time"]):
        return {"signal": "", "waited_s": 0, "gpu": "free"}
    parents = _parents()
    tree = {p: cut.start_time(_read(p, "stat").decode()) for p in cut.descendants(parents, pid)}
    os.kill(pid, signal.SIGTERM)
    sent = "TERM"
    while any(_alive(p, s) for p, s in tree.items()):
        if time.monotonic() - began > stop_timeout and sent == "TERM":
            sent = "KILL"
            for p, s in tree.items():
                if _alive(p, s):
                    os.kill(p, signal.SIGKILL)
        if time.monotonic() - began > stop_timeout + 30:
            raise cut.CutoverError(f"pid {pid}: still running 30 s after SIGKILL")
        time.sleep(0.2)
    gpu, waited = "free", time.monotonic()
    while True:
        rc, out, _ = module.run_command(
            ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"]
        )
        held = cut.gpu_pids(out) if rc == 0 else None
        if held is None:
            gpu = f"unknown: nvidia-smi could not list the compute processes (rc {rc})"
            break
        if not held & set(tree):
            break
        if time.monotonic() - waited > gpu_timeout:
            raise cut.CutoverError(
                f"pid {pid} is gone, but nvidia-smi still lists {sorted(held & set(tree))} on "
                f"the GPUs after {gpu_timeout} s"
            )
        time.sleep(1)
    return {"signal": sent, "waited_s": round(time.monotonic() - began, 1), "gpu": gpu}


def restore(module, rec, folder, unit):
    text, _ = cut.env_file(rec["environ"])
    fd = _dir_fd(folder, create=False)
    try:
        _write(fd, f"pid{rec['pid']}.env", text.encode())
    finally:
        os.close(fd)
    module.run_command(["systemctl", "reset-failed", f"{unit}.service"])
    argv = cut.restore_argv(rec, unit, f"{folder}/pid{rec['pid']}.env")
    rc, _, err = module.run_command(argv)
    if rc != 0:
        raise cut.CutoverError(f"systemd-run failed (rc {rc}): {err.strip()}")
    _, out, _ = module.run_command(["systemctl", "show", "-P", "MainPID", f"{unit}.service"])
    return {
        "unit": unit,
        "pid": int(out.strip() or 0),
        "output": rec["output"] or f"the journal of {unit}.service",
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {
                "type": "str",
                "choices": ["recorded", "stopped", "restored"],
                "required": True,
            },
            "pid": {"type": "int", "required": True},
            "argv": {"type": "list", "elements": "str", "default": []},
            "dir": {"type": "path", "required": True},
            "stop_timeout": {"type": "int", "default": 60},
            "gpu_timeout": {"type": "int", "default": 60},
            "unit": {"type": "str", "default": "gpuhost-adopt-restore"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not _UNIT.fullmatch(p["unit"]):
        module.fail_json(msg=f"unit: got {p['unit']!r}; allowed: letters, digits and :_.@-")
    if not os.path.isabs(p["dir"]):
        module.fail_json(msg=f"dir: got {p['dir']!r}; allowed: an absolute path")
    try:
        if p["state"] == "recorded":
            rec = record(module, p["pid"], p["argv"], p["dir"])
            module.exit_json(changed=True, record=cut.summary(rec))
        rec = load(p["pid"], p["dir"])
        if module.check_mode:
            module.exit_json(changed=True, record=cut.summary(rec))
        if p["state"] == "stopped":
            done = stop(module, rec, p["stop_timeout"], p["gpu_timeout"])
            module.exit_json(changed=bool(done["signal"]), record=cut.summary(rec), stopped=done)
        done = restore(module, rec, p["dir"], p["unit"])
        module.exit_json(changed=True, record=cut.summary(rec), restored=done)
    except (OSError, ValueError, KeyError) as exc:
        module.fail_json(msg=f"sglang_adopt {p['state']}, pid {p['pid']}: {exc}")


if __name__ == "__main__":
    main()
