"""gpuhost commands that run a playbook. Each is a Command: its arguments and a handler.

A later command (verify, bench, update, rollback, report) adds a Command to COMMANDS;
the ones that run Ansible build a RunRequest and call execute(), which owns the run
record, the progress display and the summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from gpuhost import findings, record, summary
from gpuhost.events import EventCollector
from gpuhost.progress import Progress
from gpuhost.project import (
    Project,
    ansible_bin_dir,
    parse_extra_vars,
    resolve_inventories,
    resolve_playbook,
)
from gpuhost.runner import RunRequest, run_playbook


@dataclass
class Context:
    project: Project
    runs_root: Path
    out: Console  # summary and --json
    err: Console  # progress and messages, so stdout stays parseable
    argv: list[str]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace, Context], int]


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
    """Run the playbook, write runs/<ts>/report.json and return the report."""
    ansible_bin = ansible_bin_dir()
    run_dir = record.create_run_dir(ctx.runs_root)
    collector = EventCollector()
    mode = Progress.choose_mode(ctx.err, quiet=json_output)
    title = f"gpuhost {request.command}"
    try:
        with Progress(collector, ctx.err, title, mode):
            outcome = run_playbook(ctx.project, request, run_dir, collector, ansible_bin)
    finally:
        record.scrub_artifacts(run_dir)
    report = record.build_report(ctx.project, request, outcome, run_dir, ctx.argv)
    record.write_report(run_dir, report)
    return report


def emit(ctx: Context, report: dict, *, json_output: bool, show_findings: bool) -> int:
    """Print the report (table or JSON) and return the exit code its status maps to."""
    if json_output:
        # Plain print: rich would wrap long strings and highlight, breaking the JSON.
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        summary.print_summary(ctx.out, report, show_changes=True)
        if show_findings and report["findings"]:
            ctx.out.print(Text("Findings:", style="bold"))
            findings.print_findings(ctx.out, report["findings"])
        summary.print_footer(ctx.out, report)
    return record.STATUS_EXIT[report["status"]]


def cmd_provision(args: argparse.Namespace, ctx: Context) -> int:
    request = request_from_args(args, ctx, "provision")
    report = execute(ctx, request, json_output=args.json)
    return emit(ctx, report, json_output=args.json, show_findings=request.check)


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, check_flag=False)
    parser.add_argument(
        "--fail-on-drift",
        action="store_true",
        help="exit 1 when any host differs from the inventory (its check-mode diff)",
    )


def cmd_check(args: argparse.Namespace, ctx: Context) -> int:
    from gpuhost import rollout  # deferred: rollout builds on this module

    request = request_from_args(args, ctx, "check")
    request.check = True
    report = execute(ctx, request, json_output=args.json)
    rollout.apply_drift(report, fail_on_drift=args.fail_on_drift)
    code = emit(ctx, report, json_output=args.json, show_findings=True)
    if not args.json:
        rollout.print_drift(ctx.out, report["drift"])
    return code


COMMANDS = [
    Command(
        "provision",
        "converge hosts to the wanted state (runs site.yml)",
        lambda p: add_run_arguments(p, check_flag=True),
        cmd_provision,
    ),
    Command(
        "check",
        "show what provision would change and the preflight findings; change nothing",
        add_check_arguments,
        cmd_check,
    ),
]
