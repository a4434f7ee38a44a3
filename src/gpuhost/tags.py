"""Refuse a --tags/--skip-tags value that no task of the playbook carries.

Ansible runs nothing for an unknown tag and reports success (`gpuhost provision -t nccl` on a
playbook without that tag would "succeed" having done nothing). The known tags are what
`ansible-playbook --list-tags` prints for the same playbook, inventory and extra vars, so
they follow the playbooks and roles as they change; nothing here lists them by hand.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from gpuhost.errors import GpuhostError
from gpuhost.project import Project
from gpuhost.runner import RunRequest

# Selectors Ansible itself understands in --tags/--skip-tags, whatever the playbook holds.
SPECIAL_TAGS = frozenset({"all", "tagged", "untagged", "always", "never"})
_TASK_TAGS = re.compile(r"TASK TAGS: \[(.*)\]\s*$")
_LIST_TIMEOUT_S = 300


def parse_list_tags(output: str) -> set[str]:
    """The tags in `ansible-playbook --list-tags` output (its `TASK TAGS: [...]` lines, which
    include the tags a task inherits from its play, role and block)."""
    found: set[str] = set()
    for line in output.splitlines():
        match = _TASK_TAGS.search(line)
        if match:
            found.update(t.strip() for t in match.group(1).split(",") if t.strip())
    return found


def requested(value: str | None) -> list[str]:
    return [t.strip() for t in (value or "").split(",") if t.strip()]


def known_tags(project: Project, request: RunRequest, env: dict[str, str]) -> set[str]:
    """Ask ansible-playbook which tags the playbook's tasks carry."""
    with tempfile.TemporaryDirectory(prefix="gpuhost-tags-") as tmp:
        argv = ["ansible-playbook", "--list-tags", str(request.playbook)]
        for inventory in request.inventories:
            argv += ["-i", str(inventory)]
        if request.limit:
            argv += ["--limit", request.limit]
        if request.extra_vars:
            # A file (0600 in a 0700 directory), never argv: the values may be secrets.
            path = Path(tmp) / "extravars.json"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(request.extra_vars, handle)
            argv += ["-e", f"@{path}"]
        for path in request.extra_var_files:
            argv += ["-e", f"@{path}"]
        try:
            proc = subprocess.run(
                argv,
                cwd=project.root,
                env=env,
                capture_output=True,
                text=True,
                timeout=_LIST_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GpuhostError(f"cannot list the playbook's tags: {exc}") from None
    if proc.returncode != 0:
        why = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        raise GpuhostError(
            f"cannot list the tags of {request.playbook} (ansible-playbook --list-tags "
            f"exited {proc.returncode}):\n{why}"
        )
    return parse_list_tags(proc.stdout)


def check_tags(project: Project, request: RunRequest, env: dict[str, str]) -> None:
    """Exit 2, before anything runs, when a --tags/--skip-tags value matches no task."""
    given = {"--tags": requested(request.tags), "--skip-tags": requested(request.skip_tags)}
    if not any(given.values()):
        return
    known = known_tags(project, request, env)
    for option, values in given.items():
        unknown = [t for t in values if t not in known and t not in SPECIAL_TAGS]
        if unknown:
            listed = ", ".join(sorted(known - SPECIAL_TAGS)) or "none (no task has a tag)"
            raise GpuhostError(
                f"{option} {','.join(unknown)}: no task in {request.playbook.name} has "
                f"{'this tag' if len(unknown) == 1 else 'these tags'}; known tags: {listed}; "
                f"Ansible's own: {', '.join(sorted(SPECIAL_TAGS))}"
            )
