# Copyright: gpuhost contributors
# Apache-2.0
"""The SGLang server's command line and environment as systemd reads them back.

render_args() turns a validated profile (gpuhost_profile.validate) into the server's
arguments; exec_start() and env_value() quote them for the unit's ExecStart= line and its
EnvironmentFile. Pure; used by the action plugin gpuhost_sglang_profile (through
gpuhost_profile) and the filters gpuhost_exec_start / gpuhost_env_value.
"""

from __future__ import annotations

import json
import re


def render_args(effective, flags, listen, model_path=None):
    """The server's arguments (without the entry point): fixed ones first, then the flags."""
    args = [
        "--model-path",
        str(model_path or effective["model"]),
        "--served-model-name",
        effective["served_model_name"],
        "--host",
        str(listen.get("host", "127.0.0.1")),
        "--port",
        str(listen.get("port", 30000)),
        "--tp-size",
        str(effective["tp_size"]),
    ]
    if effective.get("revision") and effective["revision"] != "main" and not model_path:
        args += ["--revision", effective["revision"]]
    for flag, value in flags.items():
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            args += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            args += [flag, json.dumps(value, sort_keys=True)]
        elif isinstance(value, float):
            args += [flag, repr(value)]
        else:
            args += [flag, str(value)]
    return args


_PLAIN = re.compile(r"[A-Za-z0-9_./:=,+@-]+")
# C0 and C1 controls, DEL and the Unicode line/paragraph separators: a newline in a unit,
# env file, nftables rule or launcher argument starts a new directive or rule there.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def control_characters(value):
    """The control characters in value (strings, and the keys and items of lists and
    mappings, recursively), as a sorted list of their repr(); [] when there are none."""
    found = set()

    def walk(item):
        if isinstance(item, str):
            found.update(_CONTROL.findall(item))
        elif isinstance(item, dict):
            for key, sub in item.items():
                walk(key)
                walk(sub)
        elif isinstance(item, (list, tuple)):
            for sub in item:
                walk(sub)

    walk(value)
    return sorted(repr(c) for c in found)


def unit_text(value):
    """Free text for a unit's Description= (or a comment): refused with a control character,
    `%` doubled so systemd does not expand it as a specifier."""
    text = str(value)
    bad = control_characters(text)
    if bad:
        raise ValueError(f"{text!r}: control character(s) {', '.join(bad)} cannot go into a unit")
    return text.replace("%", "%%")


def systemd_quote(arg):
    """One argument as systemd's ExecStart parser reads it back unchanged."""
    text = str(arg).replace("%", "%%").replace("$", "$$")
    if text and _PLAIN.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_start(argv):
    return " ".join(systemd_quote(a) for a in argv)


def env_value(value):
    """A value for a systemd EnvironmentFile line (double-quoted when needed)."""
    text = ("1" if value else "0") if isinstance(value, bool) else str(value)
    if _PLAIN.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'
