"""One playbook run and its record, without any printing: runs/<ts>/ is created, the
playbook runs through ansible-runner (runner.py), the inputs that may carry secrets are
scrubbed, and report.json is written. Before any of it: a --tags/--skip-tags value that no
task carries is refused (tags.py). The caller passes the display (progress.py) that
watches the events; the summary is printed by the command from the returned report.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

from gpuhost import environment, record, rundir, tags
from gpuhost.events import EventCollector
from gpuhost.project import Project, ansible_bin_dir
from gpuhost.runner import RunRequest, run_playbook


def run_and_record(
    project: Project,
    runs_root: Path,
    request: RunRequest,
    argv: list[str],
    collector: EventCollector,
    display: AbstractContextManager,
) -> dict:
    """Run the playbook, write runs/<ts>/report.json and return the report."""
    ansible_bin = ansible_bin_dir()
    env = environment.for_ansible(project, ansible_bin)
    tags.check_tags(project, request, env)  # exit 2 before a run record exists
    run_dir = rundir.create_run_dir(runs_root)
    try:
        with display:
            outcome = run_playbook(project, request, run_dir, collector, env)
    finally:
        record.scrub_artifacts(run_dir)
    report = record.build_report(project, request, outcome, run_dir, argv)
    record.write_report(run_dir, report)
    return report
