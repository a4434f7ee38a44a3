"""`gpuhost rollback`: each host back to its previous known-good server config
(playbooks/rollback.yml), host by host, drained and health-gated like an update."""

from __future__ import annotations

import argparse

from gpuhost.commands import base, update

NAME = "rollback"
HELP = (
    "restore each host's previous known-good server config (the one before the last "
    "update), host by host, drained and health-gated"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base.add_run_arguments(parser, check_flag=True)
    parser.add_argument(
        "--serial",
        type=update.serial,
        help=(
            "units rolled back at a time, a serving group (all its hosts at once) or a host "
            "on its own (default 1)"
        ),
    )


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    return update.run_rollout(args, ctx, NAME, "rollback.yml")
