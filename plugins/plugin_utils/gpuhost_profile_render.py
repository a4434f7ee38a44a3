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

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import SERVER_PORT
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_catalogue import option_like


def _pair(flag, value):
    """A flag and its one value. A value that starts with '-' goes in the same word
    (`--flag=-1`): as a word of its own argparse could read it as an option (a negative
    number is the one dash-led value gpuhost.gpu.sglang_profile lets through)."""
    text = str(value)
    return [f"{flag}={text}"] if text.startswith("-") else [flag, text]


def render_args(effective, flags, listen, model_path=None):
    """The server's arguments (without the entry point): fixed ones first, then the flags.

    Every value reaches argparse as a value of its own flag: single values through _pair,
    list items as words of their own, refused (ValueError) when argparse would read one as
    an option (a list ends at such a word and the rest, `--host 0.0.0.0`, is parsed as
    options). gpuhost_profile_flags refuses those first, naming the flag; this is the last
    guard, so --host and --port come only from `listen`.
    """
    args = [
        *_pair("--model-path", model_path or effective["model"]),
        *_pair("--served-model-name", effective["served_model_name"]),
        *_pair("--host", listen.get("host", "127.0.0.1")),
        *_pair("--port", listen.get("port", SERVER_PORT)),
        *_pair("--tp-size", effective["tp_size"]),
    ]
    if effective.get("revision") and effective["revision"] != "main" and not model_path:
        args += _pair("--revision", effective["revision"])
    for flag, value in flags.items():
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            items = [str(v) for v in value]
            bad = [item for item in items if option_like(item)]
            if bad:
                raise ValueError(
                    f"{flag}: list item(s) {bad!r} start with '-' and would be read as options, "
                    "not values; allowed: items that do not start with '-' (negative numbers)"
                )
            args += [flag, *items]
        elif isinstance(value, dict):
            args += _pair(flag, json.dumps(value, sort_keys=True))
        elif isinstance(value, float):
            args += _pair(flag, repr(value))
        else:
            args += _pair(flag, value)
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
