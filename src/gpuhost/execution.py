"""One playbook run and its record, without any printing: under the inventory's lock
(locking.py), runs/<ts>/ is created, the playbook runs through ansible-runner (runner.py),
the inputs that may carry secrets are scrubbed (also after Ctrl-C, SIGTERM or SIGHUP:
signals.py), and report.json is written. Before any of it: a --tags/--skip-tags value that no
task carries is refused (listing.py). The caller passes the display (progress.py) that
watches the events; the summary is printed by the command from the returned report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpuhost import environment, listing, locking, record, rundir, signals, timeline
from gpuhost.events import EventCollector
from gpuhost.project import Project, ansible_bin_dir
from gpuhost.runner import RunRequest, run_playbook


class Display(Protocol):
    """What watches a run (progress.Progress): entered around it; use_plan hands it a way to
    get each play's task count, which it may call (in its own thread) or not."""

    def use_plan(self, get_plan: Callable[[], list[tuple[str, int]] | None]) -> None: ...

    def __enter__(self) -> object: ...

    def __exit__(self, *exc_info: object) -> None: ...


def run_and_record(
    project: Project,
    runs_root: Path,
    request: RunRequest,
    argv: list[str],
    collector: EventCollector,
    display: Display,
) -> dict:
    """Run the playbook, write runs/<ts>/report.json and return the report."""
    ansible_bin = ansible_bin_dir()
    env = environment.for_ansible(project, ansible_bin)
    if listing.selects_tags(request):
        plan = listing.read(project, request, env)
        listing.check_tags(plan, request)  # exit 2 before a run record exists
        display.use_plan(lambda: plan.task_counts(request.tags, request.skip_tags))
    else:
        display.use_plan(functools.partial(listing.task_totals, project, request, env))
    holder = " ".join(record.redact_argv(argv))
    with locking.inventory_lock(runs_root, request.inventories, holder):
        run_dir = rundir.create_run_dir(runs_root)
        try:
            with display:
                outcome = run_playbook(project, request, run_dir, collector, env)
        finally:
            # A further Ctrl-C/SIGTERM must not cut the scrub short: it waits until after.
            with signals.deferred():
                record.scrub_artifacts(run_dir)
        with signals.deferred():
            report = record.build_report(project, request, outcome, run_dir, argv)
            timeline.attach(report, run_dir.path)
            record.write_report(run_dir, report)
    return report
