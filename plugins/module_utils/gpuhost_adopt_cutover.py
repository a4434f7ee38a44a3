# Copyright: gpuhost contributors
# Apache-2.0
"""The cutover of `gpuhost adopt --apply` on the host (issue 31 item 3; docs/adopt.md).

The logic of the `sglang_adopt` module, run as root: record the hand-started server exactly
as it runs (argv, environment, working directory, uid/gid, where its output goes) from /proc
at the moment of the cutover into a root-only 0600 file; stop it (SIGTERM, SIGKILL after a
timeout, then wait until no process of it holds GPU memory); and, when the managed unit
fails its gate, start the same command again as its user through a transient systemd unit.

Secrets stay in the record file: the module returns the argv with secret flags redacted and
the names of the variables, never their values. The restored command gets its environment
from an EnvironmentFile (root-only, read by systemd), so no variable travels in argv; it runs
as the old uid/gid (root never executes what a user can write), and its output is appended to
the file the old process wrote to by a shell running as that user (root never opens a path
the user controls).
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_discover import (
    entry,
    redact_argv,
)

_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# A control character systemd refuses in a value (tab and newline it keeps).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Runs as the old user: appends the command's output where the old process wrote ($0).
APPEND = 'exec "$@" >>"$0" 2>&1'


class CutoverError(ValueError):
    """The cutover cannot go on; the message names what and why."""


def start_time(stat_text: str) -> int:
    """Field 22 of /proc/PID/stat (clock ticks since boot): a pid reused by another process
    has another."""
    return int(stat_text.rpartition(")")[2].split()[19])


def ids(status_text: str) -> tuple[int, int]:
    """The real uid and gid from /proc/PID/status."""
    found = {}
    for line in status_text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Uid", "Gid"):
            found[key] = int(rest.split()[0])
    return found["Uid"], found["Gid"]


def output_target(link: str) -> str:
    """Where the process's stdout went (readlink /proc/PID/fd/1), when it is a file that can
    be appended to again; "" for a pipe, a socket, a terminal, /dev/null or a deleted file."""
    if not link.startswith("/") or link.endswith(" (deleted)") or link.startswith("/dev/"):
        return ""
    return link


def split_environ(raw: bytes) -> list[tuple[bytes, bytes]]:
    """/proc/PID/environ as (name, value) pairs, in order, byte for byte."""
    out = []
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            out.append((name, value))
    return out


def _quoted(value: str) -> str:
    """Double quotes: systemd's parser takes a quote as one only at the start of a value, and
    in double quotes a backslash escapes exactly \\, ", ` and $ (no expansion)."""
    return '"' + re.sub(r'([\\"`$])', r"\\\1", value) + '"'


def env_file(pairs: list[tuple[bytes, bytes]]) -> tuple[str, list[str]]:
    """The text of a systemd EnvironmentFile that gives back these variables exactly, and the
    names of those it cannot carry (a name systemd refuses, a value not UTF-8 or with a
    control character): each value double-quoted (systemd.exec(5), EnvironmentFile=)."""
    lines, left_out = [], []
    for name, value in pairs:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        shown = name.decode("utf-8", "replace")
        if not _NAME.fullmatch(name) or text is None or _CONTROL.search(text):
            left_out.append(shown)
            continue
        lines.append(f"{shown}={_quoted(text)}")
    return "".join(line + "\n" for line in lines), left_out


def public_argv(argv: list[str]) -> list[str]:
    """argv as the run may show it: the secret flags' values redacted."""
    return redact_argv(argv, entry(argv) or 1)


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """What the run may show of a record: no environment value, no secret flag value."""
    return {
        "pid": record["pid"],
        "start_time": record["start_time"],
        "argv": public_argv(record["argv"]),
        "cwd": record["cwd"],
        "uid": record["uid"],
        "gid": record["gid"],
        "output": record["output"],
        "env_names": [name.decode("utf-8", "replace") for name, _ in record["environ"]],
        "env_left_out": record["env_left_out"],
    }


def restore_argv(record: dict[str, Any], unit: str, env_path: str) -> list[str]:
    """systemd-run's argv that starts the recorded command again as it was: its uid and gid,
    its working directory, its environment from env_path, its output appended to the file it
    wrote before (else the transient unit's journal)."""
    argv = record["argv"]
    if not argv or not record["cwd"].startswith("/"):
        raise CutoverError(
            f"pid {record['pid']}: the record has no argv or no absolute working directory "
            f"(cwd {record['cwd']!r}); it cannot be started again"
        )
    if record["uid"] == 0:
        raise CutoverError(
            f"pid {record['pid']} ran as root: gpuhost starts no command of a root server "
            "again (start it yourself from its record)"
        )
    run = [
        "systemd-run",
        f"--unit={unit}",
        f"--description=hand-started SGLang server (pid {record['pid']}) restored by gpuhost adopt",
        f"--uid={record['uid']}",
        f"--gid={record['gid']}",
        f"--working-directory={record['cwd']}",
        f"--property=EnvironmentFile={env_path}",
        "--collect",
        "--",
    ]
    if record["output"]:
        return [*run, "/bin/sh", "-c", APPEND, record["output"], *argv]
    return [*run, *argv]


def descendants(parents: dict[int, int], pid: int) -> list[int]:
    """pid and every process below it, from {pid: ppid}."""
    tree, todo = [pid], [pid]
    while todo:
        here = todo.pop()
        for child, parent in sorted(parents.items()):
            if parent == here and child not in tree:
                tree.append(child)
                todo.append(child)
    return tree


def gpu_pids(text: str) -> set[int] | None:
    """The pids of `nvidia-smi --query-compute-apps=pid --format=csv,noheader`; None when the
    answer is not that list (nvidia-smi could not say)."""
    out = set()
    for line in (text or "").splitlines():
        word = line.strip()
        if not word:
            continue
        if not word.isdigit():
            return None
        out.add(int(word))
    return out


def check_dir(st: os.stat_result, path: str) -> None:
    """The record directory must be root's alone: a directory, uid 0, no group/other access."""
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
        raise CutoverError(
            f"{path}: must be a directory owned by root with mode 0700 (got uid {st.st_uid}, "
            f"mode {stat.S_IMODE(st.st_mode):04o}); it holds the old server's environment"
        )


def dump(record: dict[str, Any]) -> bytes:
    data = dict(record)
    data["environ"] = [[n.decode("latin-1"), v.decode("latin-1")] for n, v in record["environ"]]
    return json.dumps(data, sort_keys=True).encode()


def load(raw: bytes) -> dict[str, Any]:
    data = json.loads(raw)
    data["environ"] = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in data["environ"]]
    return data
