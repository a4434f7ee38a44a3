"""`gpuhost check`: site.yml in check mode with diff; findings and drift, nothing changed."""

from __future__ import annotations

import argparse

from gpuhost import rollout, summary
from gpuhost.commands import base

NAME = "check"
HELP = "show what provision would change and the preflight findings; change nothing"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base.add_run_arguments(parser, check_flag=False)
    parser.add_argument(
        "--fail-on-drift",
        action="store_true",
        help="exit 1 when any host differs from the inventory (its check-mode diff)",
    )


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    request = base.request_from_args(args, ctx, NAME)
    request.check = True
    report = base.execute(ctx, request, json_output=args.json)
    rollout.apply_drift(report, fail_on_drift=args.fail_on_drift)
    code = base.emit(ctx, report, json_output=args.json, show_findings=True)
    if not args.json:
        summary.print_drift(ctx.out, report["drift"], report["drift_unknown"])
    return code
