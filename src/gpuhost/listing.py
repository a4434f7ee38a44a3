"""What ansible-playbook itself says about a playbook before it runs (`--list-tasks
--list-tags`, for the same playbook, inventory, limit, tags and extra vars): its tags and
each play's task count.

The tags refuse a --tags/--skip-tags value that no task carries: Ansible runs nothing for an
unknown tag and reports success (`gpuhost provision -t nccl` on a playbook without that tag
would "succeed" having done nothing). Nothing here lists tags by hand, so the check follows
the playbooks and roles as they change. The task counts are the "done of total" of the live
progress display (tasks of dynamic includes are not in them: a count may pass its total).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpuhost.errors import GpuhostError
from gpuhost.project import Project
from gpuhost.runner import RunRequest

# Selectors Ansible itself understands in --tags/--skip-tags, whatever the playbook holds.
SPECIAL_TAGS = frozenset({"all", "tagged", "untagged", "always", "never"})
_TASK_TAGS = re.compile(r"TASK TAGS: \[(.*)\]\s*$")
_PLAY = re.compile(r"^\s*play #\d+ \((.*?)\): (.*?)\tTAGS: ")
_TASK = re.compile(r"^\s{6}(?!TASK TAGS: )\S.*\tTAGS: \[(.*)\]\s*$")
_LIST_TIMEOUT_S = 300


@dataclass(frozen=True)
class Listing:
    """The whole playbook, no tag selection applied (so every tag is known)."""

    tags: frozenset[str]
    # (play name, each task's tags: its own plus those it inherits), in play order
    plays: tuple[tuple[str, tuple[frozenset[str], ...]], ...]

    def task_counts(self, only: str | None, skip: str | None) -> list[tuple[str, int]]:
        """Per play, how many tasks this --tags/--skip-tags selection runs."""
        only_set, skip_set = set(requested(only)) or {"all"}, set(requested(skip))
        return [
            (name, sum(runs(t, only_set, skip_set) for t in tasks)) for name, tasks in self.plays
        ]


def runs(task_tags: frozenset[str], only: set[str], skip: set[str]) -> bool:
    """Whether a task with these tags runs under --tags/--skip-tags: Ansible's own rule
    (ansible.playbook.taggable.Taggable.evaluate_tags)."""
    tags = set(task_tags) or {"untagged"}
    untagged = tags == {"untagged"}
    run = (
        "always" in tags
        or ("all" in only and "never" not in tags)
        or not tags.isdisjoint(only)
        or ("tagged" in only and not untagged and "never" not in tags)
    )
    if run and skip:
        if "all" in skip:
            run = "always" in tags and "always" not in skip
        elif not tags.isdisjoint(skip) or ("tagged" in skip and not untagged):
            run = False
    return run


def parse(output: str) -> Listing:
    """`ansible-playbook --list-tasks --list-tags` output as tags and plays' tasks."""
    plays: list[tuple[str, list[frozenset[str]]]] = []
    for line in output.splitlines():
        play = _PLAY.match(line)
        task = _TASK.match(line)
        if play:
            plays.append((play.group(2), []))
        elif plays and task:
            plays[-1][1].append(frozenset(t.strip() for t in task.group(1).split(",") if t.strip()))
    return Listing(
        frozenset(parse_list_tags(output)), tuple((name, tuple(tasks)) for name, tasks in plays)
    )


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


def read(project: Project, request: RunRequest, env: dict[str, str]) -> Listing:
    """Ask ansible-playbook for the playbook's tasks and tags; GpuhostError when it fails."""
    with tempfile.TemporaryDirectory(prefix="gpuhost-list-") as tmp:
        argv = ["ansible-playbook", "--list-tasks", "--list-tags", str(request.playbook)]
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
            f"cannot list the tasks of {request.playbook} (ansible-playbook --list-tasks "
            f"exited {proc.returncode}):\n{why}"
        )
    return parse(proc.stdout)


def task_totals(
    project: Project, request: RunRequest, env: dict[str, str]
) -> list[tuple[str, int]] | None:
    """Per play, the tasks this run's tag selection runs, for the progress display (which
    does without them when the listing fails)."""
    try:
        return read(project, request, env).task_counts(request.tags, request.skip_tags)
    except GpuhostError:
        return None


def selects_tags(request: RunRequest) -> bool:
    return bool(requested(request.tags) or requested(request.skip_tags))


def check_tags(listing: Listing, request: RunRequest) -> None:
    """Exit 2, before anything runs, when a --tags/--skip-tags value matches no task."""
    given = {"--tags": requested(request.tags), "--skip-tags": requested(request.skip_tags)}
    known = set(listing.tags)
    for option, values in given.items():
        unknown = [t for t in values if t not in known and t not in SPECIAL_TAGS]
        if unknown:
            listed = ", ".join(sorted(known - SPECIAL_TAGS)) or "none (no task has a tag)"
            raise GpuhostError(
                f"{option} {','.join(unknown)}: no task in {request.playbook.name} has "
                f"{'this tag' if len(unknown) == 1 else 'these tags'}; known tags: {listed}; "
                f"Ansible's own: {', '.join(sorted(SPECIAL_TAGS))}"
            )
