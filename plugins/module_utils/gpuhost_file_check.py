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
