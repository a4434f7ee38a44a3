"""`gpuhost verify`: check the running server (playbooks/verify.yml)."""

from __future__ import annotations

import argparse

from rich.text import Text

from gpuhost import record, results, summary
from gpuhost.commands import base

NAME = "verify"
HELP = "check the running server: health, served name, known answers, TTFT, parsers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base.add_run_arguments(parser, check_flag=True)


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    base.default_playbook(args, ctx, "verify.yml")
    request = base.request_from_args(args, ctx, NAME)
    rep = base.execute(ctx, request, json_output=args.json)
    run_facts = results.finish(rep)
    if args.json:
        return base.print_json(rep)
    summary.print_summary(ctx.out, rep, show_changes=True)
    summary.print_verify(ctx.out, run_facts)
    ctx.out.print(Text(f"Report: {rep['report_md']}", style="dim"))
    summary.print_footer(ctx.out, rep)
    return record.STATUS_EXIT[rep["status"]]
