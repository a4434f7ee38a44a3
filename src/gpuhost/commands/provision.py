"""`gpuhost provision`: converge hosts to the wanted state (site.yml)."""

from __future__ import annotations

import argparse

from gpuhost.commands import base

NAME = "provision"
HELP = "converge hosts to the wanted state (runs site.yml)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base.add_run_arguments(parser, check_flag=True)


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    request = base.request_from_args(args, ctx, NAME)
    report = base.execute(ctx, request, json_output=args.json)
    return base.emit(ctx, report, json_output=args.json, show_findings=request.check)
