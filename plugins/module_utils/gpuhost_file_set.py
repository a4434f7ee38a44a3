"""Write a role's files and directories in one module call. The pure half of `file_set`.

A no-op converge paid one round trip per ansible.builtin.template / copy / file task (issue 29
item 6); here one call compares and writes them all, each by the rules of
gpuhost_service_path (the walk from / on open descriptors, no link followed unless only root
could have made it, a temporary file in the same directory, fsync, rename, owner and mode set
on the descriptor). A root-owned file goes only in a directory no other account can change.

An entry is a file (its content given, or copied from `src` on the host, read by the same
rules), a directory, or `absent` (a file or link removed, never followed; a directory there is
refused). Each entry names its result (`files[name]`: changed, path, created, fixed), so the
tasks that read one file's change (a restart, a daemon-reload, the known-good copy) read that
one. A secret entry's content comes from a separate no_log option and never reaches a diff.
A `check_only` entry is compared as in check mode and never written, in the same call (a
role learns whether a later write would change anything without a call of its own); a
refusal there is reported (`refused`, counted as a change), not raised, so the later write
meets it where it always did.
`look` is the read half: lstat of several paths in one call (module path_stats), a link's
target with it; `read_texts` the content of small regular files found by the walk's rules.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
from typing import Any

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (
    ServicePathError,
    ensure_directory,
    read_file,
    remove_file,
    write_file,
)

_MODE = re.compile(r"^0?[0-7]{3,4}$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _check_entries(entries: list[dict[str, Any]], secrets: dict[str, str]) -> None:
    seen: set[str] = set()
    for entry in entries:
        name = entry.get("name", "")
        if not _NAME.match(name or ""):
            raise ServicePathError(
                f"files: name {name!r} is not a result key (lower case letters, digits, _)"
            )
        if name in seen:
            raise ServicePathError(f"files: name {name!r} is given twice; each names one result")
        seen.add(name)
        if entry.get("state") != "absent" and not _MODE.match(entry.get("mode") or ""):
            raise ServicePathError(
                f"files[{name}].mode: {entry.get('mode')!r} is not an octal mode such as '0644'"
            )
        if entry.get("secret") and not entry.get("src") and name not in secrets:
            raise ServicePathError(
                f"files[{name}]: secret, but secret_contents has no {name!r} (its content)"
            )


def apply(
    entries: list[dict[str, Any]],
    secrets: dict[str, str] | None = None,
    check: bool = False,
    diff: bool = False,
) -> dict[str, Any]:
    """Make every entry what it says, in order; stop at the first refusal (ServicePathError)
    with nothing after it touched. Returns changed, files (name -> result) and diff (a list,
    one per changed file that is not secret, when diff is asked for)."""
    secrets = secrets or {}
    _check_entries(entries, secrets)
    files: dict[str, dict[str, Any]] = {}
    diffs: list[dict[str, str]] = []
    for entry in entries:
        name = entry["name"]
        if entry.get("check_only"):
            try:
                files[name] = _apply_one(entry, secrets, True, False, diffs)
            except ServicePathError as err:
                files[name] = {
                    "changed": True,
                    "path": entry["path"],
                    "created": [],
                    "fixed": [],
                    "refused": str(err),
                }
            continue
        files[name] = _apply_one(entry, secrets, check, diff, diffs)
    return {
        "changed": any(
            r["changed"]
            for e, r in zip(entries, files.values(), strict=True)
            if not e.get("check_only")
        ),
        "files": files,
        "diff": diffs,
    }


def _apply_one(
    entry: dict[str, Any], secrets: dict[str, str], check: bool, diff: bool, diffs: list
) -> dict[str, Any]:
    """One entry made what it says (check: compared only); a diff appended to diffs."""
    name, path = entry["name"], entry["path"]
    mode = int(entry.get("mode") or "0", 8)
    owner, group = entry.get("owner") or "root", entry.get("group") or "root"
    state = entry.get("state") or "file"
    if state == "directory":
        return ensure_directory(path, owner, group, mode, check)
    if state == "absent":
        return remove_file(path, check)
    secret = bool(entry.get("secret"))
    if entry.get("src"):
        data = read_file(entry["src"])
    else:
        data = (secrets[name] if secret else entry.get("content") or "").encode()
    result = write_file(
        path,
        data,
        owner,
        group,
        mode,
        check,
        root_dir=owner == "root",
        keep_before=diff and not secret,
    )
    before = result.pop("before", None)
    if before is not None and result["changed"] and before != data:
        diffs.append(
            {
                "before_header": result["path"],
                "after_header": result["path"],
                "before": before.decode(errors="replace"),
                "after": data.decode(errors="replace"),
            }
        )
    return result


def look(paths: list[str]) -> list[dict[str, Any]]:
    """lstat of each path (a link is reported as one, never followed), in the shape of
    ansible.builtin.stat's `stat` with follow: false, as `{item, stat}` in the order given, so
    a task that looped stat over the same list reads the same `results[i].stat`."""
    return [{"item": path, "stat": _stat_of(path)} for path in paths]


# A read returns what a role renders from (role nccl's environment file): small text only.
TEXT_MAX = 1 << 20


def read_texts(paths: list[str]) -> dict[str, str]:
    """path -> text of each regular file there, read by the walk's rules (gpuhost_service_path:
    no link followed unless only root could have made it); a missing path is left out. More
    than TEXT_MAX bytes, or a path that is not a regular file, is refused (ServicePathError)."""
    texts = {}
    for path in paths:
        try:
            os.lstat(path)
        except FileNotFoundError:
            continue
        data = read_file(path)
        if len(data) > TEXT_MAX:
            raise ServicePathError(
                f"{path}: {len(data)} bytes, more than the {TEXT_MAX} a read returns; "
                "it is not the small text file expected here"
            )
        texts[path] = data.decode(errors="replace")
    return texts


def _stat_of(path: str) -> dict[str, Any]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    mode = st.st_mode
    link = {"lnk_target": os.readlink(path)} if stat.S_ISLNK(mode) else {}
    return link | {
        "exists": True,
        "path": path,
        "isdir": stat.S_ISDIR(mode),
        "isreg": stat.S_ISREG(mode),
        "islnk": stat.S_ISLNK(mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "pw_name": _name(pwd.getpwuid, st.st_uid),
        "gr_name": _name(grp.getgrgid, st.st_gid),
        "mode": f"{stat.S_IMODE(mode):04o}",
        "wgrp": bool(mode & stat.S_IWGRP),
        "woth": bool(mode & stat.S_IWOTH),
        "size": st.st_size,
        "nlink": st.st_nlink,
    }


def _name(lookup, number: int) -> str:
    try:
        return lookup(number)[0]
    except KeyError:
        return str(number)
