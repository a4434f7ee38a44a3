"""What the commands share: the context they run in, the ansible-playbook style options, and
the three steps of a playbook command: build a RunRequest from the options, run it (the run
record, through gpuhost.execution, with the progress display), print the summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from gpuhost import execution, findings, record, summary, timeline
from gpuhost.events import EventCollector
from gpuhost.progress import Progress
from gpuhost.project import Project, parse_extra_vars, resolve_inventories, resolve_playbook
from gpuhost.runner import RunRequest


@dataclass
class Context:
    project: Project
    runs_root: Path
    out: Console  # summary and --json
    err: Console  # progress and messages, so stdout stays parseable
    argv: list[str]


def add_run_arguments(parser: argparse.ArgumentParser, *, check_flag: bool) -> None:
    """Options every playbook-running command shares, spelled as ansible-playbook does."""
    parser.add_argument(
        "-i",
        "--inventory",
        action="append",
        required=True,
        metavar="INVENTORY",
        help="inventory file or directory (repeatable)",
    )
    parser.add_argument("-l", "--limit", help="limit to these hosts or groups (Ansible pattern)")
    parser.add_argument("-t", "--tags", help="only run tasks with these tags (comma-separated)")
    parser.add_argument("--skip-tags", help="skip tasks with these tags (comma-separated)")
    parser.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VAR",
        help="key=value, a JSON object or @file (repeatable)",
    )
    if check_flag:
        parser.add_argument(
            "-C", "--check", action="store_true", help="check mode with diff: change nothing"
        )
    parser.add_argument("--playbook", help="playbook to run instead of site.yml")
    parser.add_argument("--json", action="store_true", help="print report.json, no table")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more Ansible detail in the artifacts"
    )


def default_playbook(args: argparse.Namespace, ctx: Context, name: str) -> None:
    """A command whose playbook is not site.yml: playbooks/<name> unless --playbook is given."""
    if not args.playbook:
        args.playbook = str(ctx.project.root / "playbooks" / name)


def request_from_args(args: argparse.Namespace, ctx: Context, command: str) -> RunRequest:
    variables, files = parse_extra_vars(args.extra_vars)
    return RunRequest(
        command=command,
        playbook=resolve_playbook(args.playbook, ctx.project),
        inventories=resolve_inventories(args.inventory),
        limit=args.limit,
        tags=args.tags,
        skip_tags=args.skip_tags,
        check=bool(getattr(args, "check", False)),
        extra_vars=variables,
        extra_var_files=files,
        verbosity=args.verbose,
    )


def execute(ctx: Context, request: RunRequest, *, json_output: bool) -> dict:
    """Run the playbook with the progress display; returns the report (report.json)."""
    collector = EventCollector()
    mode = Progress.choose_mode(ctx.err, quiet=json_output)
    progress = Progress(
        collector, ctx.err, f"gpuhost {request.command}", mode, verbose=request.verbosity
    )
    return execution.run_and_record(
        ctx.project, ctx.runs_root, request, ctx.argv, collector, display=progress
    )


def print_json(report: dict) -> int:
    # Plain write: rich would wrap long strings and highlight, breaking the JSON.
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return record.STATUS_EXIT[report["status"]]


def emit(ctx: Context, report: dict, *, json_output: bool, show_findings: bool) -> int:
    """Print the report (table or JSON) and return the exit code its status maps to."""
    if json_output:
        return print_json(report)
    summary.print_summary(ctx.out, report, show_changes=True)
    timeline.print_summary(ctx.out, report)
    if show_findings and report["findings"]:
        ctx.out.print(Text("Findings:", style="bold"))
        findings.print_findings(ctx.out, report["findings"])
    summary.print_footer(ctx.out, report)
    return record.STATUS_EXIT[report["status"]]
