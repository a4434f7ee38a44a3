"""`gpuhost update`: a rolling, health-gated config change (playbooks/update.yml).

Preflight on every host, then unit by unit (`serial`; a unit is a serving group, all its hosts
at once, or a host on its own): validate, render and, when the config
changed, drain from the router, restart, pass health and the correctness query, and rejoin
the router. A failing host is rolled back by the sglang_server role and stops the rollout
(`max_fail_percentage` 0). Which host runs which config afterwards: gpuhost.rollout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuhost import inventory, plugin_code, record, rollout, rundir, summary
from gpuhost.commands import base

NAME = "update"
# The group playbooks/update.yml and rollback.yml roll over.
WORKER_GROUP = "gpu_hosts"
HELP = (
    "roll a config change across hosts one batch at a time: drain, restart, health and "
    "correctness gate, rejoin; a failing host is rolled back and stops the rollout"
)


def serial(value: str) -> str:
    """Ansible's serial: a count (>= 1) or a percentage like 25%, of units: a serving group
    (all its hosts at once) or a host on its own (playbooks/update.yml plans the batches)."""
    try:
        plugin_code.plugin_utils("gpuhost_serial").per_batch(value, 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r}: a count >= 1 or a percentage 1-100% of units (a serving group or a "
            "host on its own)"
        ) from None
    return value.strip()


def percentage(value: str) -> int:
    if not value.isdigit() or int(value) > 100:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number 0-100")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base.add_run_arguments(parser, check_flag=True)
    parser.add_argument(
        "--serial",
        type=serial,
        help=(
            "units updated at a time, a serving group (all its hosts at once) or a host on "
            "its own: a count or a percentage (default 1)"
        ),
    )
    parser.add_argument(
        "--max-fail-percentage",
        type=percentage,
        help="failed hosts (%%) a batch may have before the rollout stops (default 0)",
    )


def run_rollout(args: argparse.Namespace, ctx: base.Context, command: str, playbook: str) -> int:
    """update and rollback: the playbook, then report["rollout"] (which host runs what)."""
    base.default_playbook(args, ctx, playbook)
    request = base.request_from_args(args, ctx, command)
    if getattr(args, "serial", None) is not None:
        request.extra_vars["rolling_update_serial"] = args.serial
    if getattr(args, "max_fail_percentage", None) is not None:
        request.extra_vars["rolling_update_max_fail_percentage"] = args.max_fail_percentage
    report = base.execute(ctx, request, json_output=args.json)
    # The rollout is for the workers (gpu_hosts) the limit selects; routers are in the recap
    # too (validation runs there) but carry no server config.
    facts = rollout.read_rollout_facts(Path(report["run_dir"]))
    targets = inventory.hosts_in_group(request.inventories, WORKER_GROUP, request.limit)
    lost = [host for host, counts in report["hosts"].items() if counts.get("unreachable")]
    groups = inventory.serving_groups(request.inventories, targets)
    report["rollout"] = rollout.rollout_section(facts, targets, lost, groups)
    record.write_report(rundir.RunDir(Path(report["run_dir"])), report)
    if not args.json:
        summary.print_rollout(ctx.out, report["rollout"])
    return base.emit(ctx, report, json_output=args.json, show_findings=False)


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    return run_rollout(args, ctx, NAME, "update.yml")
