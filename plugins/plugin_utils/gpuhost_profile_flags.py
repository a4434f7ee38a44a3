# Copyright: gpuhost contributors
# Apache-2.0
"""The serving profile's flags against the pinned sglang's argument catalogue.

Names (exact, alias, argparse abbreviation, renamed between versions, unknown, reserved for
their own variable), values (switches, choices, types, lists) and deprecations, each in
words that say what to write instead. gpuhost_profile.validate() calls check_flags() first,
then judges the flags against the host. Pure: dicts in, message lines out.
"""

from __future__ import annotations

import difflib

# Controller-only, like gpuhost_profile.py.
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_catalogue

# Flags that have their own variable: one value, one place. The message names it.
RESERVED = {
    "--model-path": "sglang_server_model_id (or the profile's model)",
    "--model": "sglang_server_model_id (or the profile's model)",
    "--served-model-name": "sglang_server_served_model_name",
    "--host": "sglang_server_host",
    "--port": "sglang_server_port",
    "--tp-size": "sglang_server_tp_size (or the profile's tp_size)",
    "--tensor-parallel-size": "sglang_server_tp_size (or the profile's tp_size)",
    "--revision": "sglang_server_revision (or the profile's revision)",
    "--api-key": "sglang_server_api_key (from Vault or the environment, never a flag)",
    "--admin-api-key": "the admin key generated on the host (sglang_server_rotate_admin_key)",
    # One server across several hosts: the serving group (issue 30, docs/multi-node.md)
    # renders all three for each node, from the inventory (gpuhost_serving_group.of_host).
    "--nnodes": "sglang_server_group (the number of hosts in the group)",
    "--node-rank": (
        "sglang_server_group (the host's place in the group's inventory order; "
        "sglang_server_node_rank pins it)"
    ),
    "--dist-init-addr": (
        "sglang_server_group (rank 0's sglang_server_group_address and "
        "sglang_server_dist_init_port)"
    ),
    "--nccl-init-addr": (
        "sglang_server_group (rank 0's sglang_server_group_address and "
        "sglang_server_dist_init_port)"
    ),
    "--disable-custom-all-reduce": (
        "the nccl role's decision (gpuhost_nccl.disable_custom_all_reduce); override it "
        "with nccl_env_overrides.disable_custom_all_reduce"
    ),
}

# Renames between sglang versions (both wheels' server_args.py): the old name is an
# "unrecognized arguments" error from 0.5.20 on; the new one does not exist before 0.5.12.
RENAMES = {
    "--nsa-prefill-backend": "--dsa-prefill-backend",
    "--nsa-decode-backend": "--dsa-decode-backend",
}
RENAMED_IN = "0.5.20"

SOURCE = (
    "sglang srt/server_args.py of the pinned wheels; SM120: local-inference-lab/rtx6kpro "
    "models/glm5.md"
)


# --------------------------------------------------------------------------------------
# catalogue lookups: gpuhost_catalogue.py (beside this file) is the one reader of the
# argument catalogue (shape: {"sglang_version", "flags": {"--x": {dest, aliases, type,
# action, choices, default, nargs, help}}}, built by role python_env from the real wheel);
# this module adds the profile's own advice to what it finds.


def resolve_flag(cat, flag):
    """(canonical, None) for an exact name or alias; (None, problem) otherwise.

    The catalogue resolves as argparse does; an abbreviation it would accept is still
    refused here, naming the full spelling, since it breaks when a new flag shares the prefix.
    """
    try:
        found = cat.resolve(flag)
    except gpuhost_catalogue.AmbiguousFlag as exc:
        full = sorted({cat.options[m] for m in exc.matches})
        if len(full) == 1:
            return None, _abbreviation(cat, flag, min(exc.matches, key=len), full[0])
        return None, (
            f"{flag} is not a flag of sglang {cat.version}; as a prefix it is ambiguous "
            f"({', '.join(full[:6])}): write the full name"
        )
    except gpuhost_catalogue.UnknownFlag:
        return None, _unknown(cat, flag)
    if found.value is not None:
        return None, (
            f"{flag} is not a flag of sglang {cat.version}; give the value in the mapping: "
            f"'{found.option}': {found.value}"
        )
    if found.how == "prefix":
        return None, _abbreviation(cat, flag, found.option, found.name)
    return found.name, None


def _abbreviation(cat, flag, spelled, canonical):
    # Suggest the spelling the user was abbreviating (--tp -> --tp-size).
    reserved = RESERVED.get(spelled) or RESERVED.get(canonical)
    where = f", and it is set through {reserved}" if reserved else ""
    return (
        f"{flag} is not a flag of sglang {cat.version}; argparse would take it as an "
        f"abbreviation of {spelled}, which breaks when a new flag shares the prefix: "
        f"write {spelled}{where}"
    )


def _unknown(cat, flag):
    renamed = RENAMES.get(flag)
    old = {new: old for old, new in RENAMES.items()}.get(flag)
    if renamed and renamed in cat:
        return (
            f"{flag} was renamed {renamed} after sglang 0.5.11 and the old name is an "
            f"'unrecognized arguments' error from {RENAMED_IN} on ({SOURCE}); sglang "
            f"{cat.version} knows only {renamed}: rename it"
        )
    if old and old in cat:
        return (
            f"{flag} does not exist in sglang {cat.version}; this version calls it "
            f"{old} ({SOURCE}): use {old}, or pin sglang >= {RENAMED_IN}"
        )
    close = difflib.get_close_matches(flag, list(cat.flags), n=3, cutoff=0.75)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"{flag} is not a flag of sglang {cat.version} (unknown or removed){hint}"


def _is_switch(entry):
    action = str(entry.get("action") or "").lower()
    return (
        entry.get("nargs") == 0
        or "store_true" in action
        or "store_const" in action
        or "storetrue" in action
    )


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def _option_like_values(flag, value, version):
    """A value argparse could read as another option: a list item, which would end the list
    and start `--host 0.0.0.0`, or a value that starts with '-' (after a flag whose value is
    optional, argparse takes no value and parses the word as an option). A negative number
    is a value; a single one is rendered in one word (`--flag=-1e-05`), a list item must be
    one argparse itself reads as a number (-1, -0.5)."""
    if isinstance(value, list):
        bad = [item for item in value if gpuhost_catalogue.option_like(item)]
    elif isinstance(value, (dict, bool)) or value is None:
        bad = []
    else:
        text = str(value)
        bad = [value] if text.startswith("-") and not _is_number(text) else []
    return [
        f"{flag} {item!r}: a value that starts with '-' would be read by sglang {version}'s "
        "argparse as another option (the way --host/--port would slip past their variables); "
        "allowed: a value that does not start with '-' (or a negative number such as -1, -0.5)"
        for item in bad
    ]


def _check_value(cat, flag, value):
    """Problems with one flag's value (a list of strings): the profile's rules on switches
    and lists, then the catalogue's argparse-exact check of each value, in this module's words.
    """
    entry, version = cat.lookup(flag), cat.version
    if _is_switch(entry):
        if value is not True:
            return [
                f"{flag} is a switch in sglang {version}: set it to true (or remove it), "
                f"got {value!r}"
            ]
        return []
    if value is True:
        return [f"{flag} takes a value in sglang {version}; got true"]
    problems = []
    if isinstance(value, list) and entry.get("nargs") in (None, "?"):
        problems.append(f"{flag} takes one value in sglang {version}; got a list")
    choices = entry.get("choices")
    kind = str(entry.get("type") or "")
    problems += _option_like_values(flag, value, version)
    for item in value if isinstance(value, list) else [value]:
        wrong = cat.check_value(flag, item)
        if not wrong:
            continue
        if choices:
            problems.append(
                f"{flag} {item!r} is not a choice of sglang {version}; allowed: "
                + ", ".join(str(c) for c in choices)
            )
        elif kind == "int":
            problems.append(f"{flag} needs an integer in sglang {version}; got {item!r}")
        elif kind == "float":
            problems.append(f"{flag} needs a number in sglang {version}; got {item!r}")
        else:
            problems += [f"{message} (sglang {version})" for message in wrong]
    return problems


def check_flags(cat, requested):
    """The effective profile's flags (`requested`) against the catalogue `cat`.

    Returns (flags, canon, errors, warnings): flags as the user spelled them (what is
    rendered) and canon, the same values by the catalogue's name (what the rules read), both
    without the flags that have an error; errors and warnings are message lines.
    """
    flags, canon, errors, warnings = {}, {}, [], []
    for flag, value in requested.items():
        if not isinstance(flag, str) or not flag.startswith("--"):
            errors.append(f"sglang_server_flags: {flag!r} must be a long flag such as --tp-size")
            continue
        if flag in RESERVED:
            errors.append(f"sglang_server_flags: {flag} is set through {RESERVED[flag]}")
            continue
        canonical, problem = resolve_flag(cat, flag)
        if problem:
            errors.append(f"sglang_server_flags: {problem}")
            continue
        if canonical in RESERVED:
            errors.append(f"sglang_server_flags: {flag} is set through {RESERVED[canonical]}")
            continue
        for message in _check_value(cat, flag, value):
            errors.append(f"sglang_server_flags: {message}")
        entry = cat.flags[canonical]
        if entry.get("deprecated") or "deprecat" in str(entry.get("action") or "").lower():
            warnings.append(
                f"{flag} is deprecated in sglang {cat.version}: "
                f"{(entry.get('help') or '').strip()[:160]}"
            )
        flags[flag] = value
        canon[canonical] = value
    for flag in ("--model-path", "--served-model-name", "--host", "--port", "--tp-size"):
        if flag not in cat:
            errors.append(f"the argument catalogue of sglang {cat.version} lacks {flag}")
    return flags, canon, errors, warnings
