"""Would gpuhost.gpu.file_set change these entries? Its own check mode, called from a role's
read module, so a role whose one read proves nothing differs leaves the file_set call out
(issue 29 item 6: writes only when the read says something differs). The comparison is
file_set's (gpuhost_file_set.apply with check=True): owner, group, mode, type, content, the
walk's refusals."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_file_set import apply
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (
    ServicePathError,
    read_file,
)


def files_changes(entries: list[dict[str, Any]]) -> list[str]:
    """One line per entry file_set would change (name, path, created or what it fixes), or
    the refusal it would fail with; [] when a file_set call would change nothing."""
    try:
        result = apply(entries, check=True)
    except ServicePathError as exc:
        return [f"refused: {exc}"]
    lines = []
    for name, res in result["files"].items():
        if res["changed"]:
            what = "created" if res.get("created") else "fixes " + ", ".join(res.get("fixed") or [])
            lines.append(f"{name}: {res['path']} {what}")
    return lines


def changes_and_texts(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """files_changes for an account that may only read them: role nccl asks as the service
    account, in the call that reads torch's NCCL version, before it knows what nccl.env will
    hold. An entry with `current` is compared with what it holds now (so only its kind,
    owner, group, mode and directory are judged) and its text returned under `texts`, for the
    caller to compare with what it renders. What stops the comparison (a missing `current`
    file, a path this account cannot open) is a line too: the writer then runs and meets it
    where it always did. Returns {changes, texts}."""
    texts: dict[str, str] = {}
    resolved = []
    try:
        for entry in entries:
            entry = {k: v for k, v in entry.items() if k != "current"} | (
                {"content": _text(entry, texts)} if entry.get("current") else {}
            )
            resolved.append(entry)
        return {"changes": files_changes(resolved), "texts": texts}
    except (ServicePathError, OSError) as exc:
        return {"changes": [f"unread: {exc}"], "texts": texts}


def _text(entry: dict[str, Any], texts: dict[str, str]) -> str:
    texts[entry["name"]] = read_file(entry["path"]).decode(errors="replace")
    return texts[entry["name"]]
