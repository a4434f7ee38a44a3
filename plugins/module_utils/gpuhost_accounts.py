"""Would ansible.builtin.group and ansible.builtin.user change the service account? The pure
half of module base_state's account read (issue 29 item 6: role base calls those two modules
only when this read finds a difference, so a no-op converge makes no call for them).

The comparison is the one those modules make for role base's arguments (group: name, system,
no gid; user: name, primary group, supplementary groups with append, home, shell, system, no
uid): a missing group or user is created; an existing group with no gid pinned is left as it
is (the system flag only applies when it is made); an existing user is changed when its
primary gid is not the group's, a wanted supplementary group does not list it as a member,
or its home or shell differ. `read` takes what NSS (getent) answers through pwd and grp, as
the modules do.
"""

from __future__ import annotations

import grp
import pwd
from typing import Any


def read(group: str, user: str, groups: list[str]) -> dict[str, Any]:
    """What the host has: the group (name, gid), the user (uid, gid, home, shell) and, for
    each wanted supplementary group, its members (None when the group does not exist)."""

    def group_info(name: str) -> dict[str, Any] | None:
        try:
            entry = grp.getgrnam(name)
        except KeyError:
            return None
        return {"gid": entry.gr_gid, "members": list(entry.gr_mem)}

    try:
        entry = pwd.getpwnam(user)
        account = {"uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir}
        account["shell"] = entry.pw_shell
    except KeyError:
        account = None
    return {
        "group": group_info(group),
        "user": account,
        "groups": {name: group_info(name) for name in groups},
    }


def changes(found: dict[str, Any], wanted: dict[str, Any]) -> dict[str, list[str]]:
    """What the group and user modules would change: {"group": [...], "user": [...]}, each a
    list of reasons ([] = that module would change nothing). wanted: group, user, groups,
    home, shell."""
    group, user = wanted["group"], wanted["user"]
    have_group, have_user = found.get("group"), found.get("user")
    group_changes = [] if have_group else [f"group {group} does not exist"]
    if not have_user:
        return {"group": group_changes, "user": [f"user {user} does not exist"]}
    user_changes = []
    if not have_group or have_user["gid"] != have_group["gid"]:
        user_changes.append(f"user {user}'s primary group is gid {have_user['gid']}, not {group}")
    for name in wanted.get("groups") or []:
        info = (found.get("groups") or {}).get(name)
        if info is None:
            user_changes.append(f"group {name} does not exist (user {user} is to be in it)")
        elif user not in info["members"]:
            user_changes.append(f"user {user} is not a member of group {name}")
    for key in ("home", "shell"):
        if have_user[key] != wanted[key]:
            user_changes.append(f"user {user}'s {key} is {have_user[key]}, not {wanted[key]}")
    return {"group": group_changes, "user": user_changes}
