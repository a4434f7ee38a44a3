"""One playbook run and its record, without any printing: under the locks of the inventory's
hosts (locking.py), runs/<ts>/ is created, the playbook runs through ansible-runner
(runner.py; secrets reach it through handover.py), every file of the record is scrubbed of
secret-named values (also after Ctrl-C, SIGTERM or SIGHUP: signals.py; redaction.Scrubber),
and report.json is written. Before any of it: a --tags/--skip-tags value that no
task carries is refused (listing.py). The caller passes the display (progress.py) that
watches the events; the summary is printed by the command from the returned report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpuhost import environment, handover, listing, locking, record, rundir, signals, timeline
from gpuhost.events import EventCollector
from gpuhost.project import Project, ansible_bin_dir
from gpuhost.redaction import Scrubber, secret_values
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
    # The secrets this run knows of from the start: the environment's and the -e values'.
    scrubber = Scrubber(secret_values([handover.secret_env(env), request.extra_vars]))
    with locking.inventory_lock(request.inventories, request.limit, holder):
        run_dir = rundir.create_run_dir(runs_root)
        try:
            with display:
                outcome = run_playbook(project, request, run_dir, collector, env, scrubber)
        finally:
            # A further Ctrl-C/SIGTERM must not cut the scrub short: it waits until after.
            with signals.deferred():
                record.scrub_artifacts(run_dir, scrubber)
        with signals.deferred():
            report = record.build_report(project, request, outcome, run_dir, argv)
            timeline.attach(report, run_dir.path)
            record.write_report(run_dir, scrubber.clean(report))
    return report
