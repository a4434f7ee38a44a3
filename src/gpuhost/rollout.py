"""`gpuhost update` and `gpuhost rollback` (rolling, health-gated config changes), and the
drift view behind `gpuhost check --fail-on-drift`.

update runs playbooks/update.yml: preflight on every host, then host by host (`serial`)
validate, render and, when the config changed, drain from the router, restart, pass health
and the correctness query, and rejoin the router. A failing host is rolled back by the
sglang_server role and stops the rollout (`max_fail_percentage` 0).

Which host carries which config is the fact `gpuhost_rollout` that role rolling_update sets
on each host it reached: {state, config, previous, known_good}. It is read from the run's
job events (plain JSON, like the findings) into report.json's "rollout"; a host the rollout
never reached keeps the config it had and is listed as `not_reached`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text

from gpuhost import record, runfacts, summary
from gpuhost.commands import (
    Command,
    Context,
    add_run_arguments,
    emit,
    execute,
    request_from_args,
)
from gpuhost.errors import GpuhostError

ROLLOUT_FACT = "gpuhost_rollout"
# What each state means for "which config does this host run now".
STATE_CONFIG = {
    "updated": "new",
    "unchanged": "new",
    "would_update": "old",
    "rolled_back": "old",
    "failed": "unknown",
    "restored": "previous",
    "not_reached": "old",
}
_STATE_STYLE = {
    "updated": "green",
    "unchanged": "green",
    "would_update": "yellow",
    "restored": "yellow",
    "rolled_back": "bold red",
    "failed": "bold red",
    "not_reached": "yellow",
}


def read_rollout_facts(run_dir: Path) -> dict[str, dict]:
    """The last gpuhost_rollout fact each host reported (runfacts walks the events)."""
    facts = runfacts.facts_from_events(run_dir)
    return {
        host: found[ROLLOUT_FACT]
        for host, found in sorted(facts.items())
        if isinstance(found.get(ROLLOUT_FACT), dict)
    }


def rollout_section(report: dict, facts: dict[str, dict]) -> dict[str, dict]:
    """Per host: state, which config it runs (new/old), and the config hashes."""
    section: dict[str, dict] = {}
    for host in sorted(set(report["hosts"]) | set(facts)):
        fact = facts.get(host)
        if fact is None:
            section[host] = {"state": "not_reached", "runs": STATE_CONFIG["not_reached"]}
            continue
        state = str(fact.get("state") or "failed")
        section[host] = {
            "state": state,
            "runs": STATE_CONFIG.get(state, "unknown"),
            "config": fact.get("config") or None,
            "previous": fact.get("previous") or None,
            "known_good": fact.get("known_good") or None,
            "message": fact.get("message") or None,
        }
    return section


def print_rollout(console: Console, section: dict[str, dict]) -> None:
    if not section:
        return
    table = summary.report_table("Rollout")
    table.add_column("host", no_wrap=True)
    table.add_column("state")
    table.add_column("runs config")
    table.add_column("config hash")
    table.add_column("before")
    for host, row in section.items():
        table.add_row(
            host,
            Text(row["state"], style=_STATE_STYLE.get(row["state"], "")),
            row["runs"],
            row.get("config") or "-",
            row.get("previous") or "-",
        )
    console.print(table)


def _rollout_run(args: argparse.Namespace, ctx: Context, command: str, playbook: str) -> int:
    if args.playbook is None:
        args.playbook = str(ctx.project.root / "playbooks" / playbook)
    request = request_from_args(args, ctx, command)
    serial = getattr(args, "serial", None)
    if serial is not None:
        request.extra_vars["rolling_update_serial"] = serial
    if getattr(args, "max_fail_percentage", None) is not None:
        request.extra_vars["rolling_update_max_fail_percentage"] = args.max_fail_percentage
    report = execute(ctx, request, json_output=args.json)
    # Only worker hosts are play targets (router calls are delegated), so every host in
    # the recap carries a server config.
    report["rollout"] = rollout_section(report, read_rollout_facts(Path(report["run_dir"])))
    record.write_report(record.RunDir(Path(report["run_dir"])), report)
    if not args.json:
        print_rollout(ctx.out, report["rollout"])
    return emit(ctx, report, json_output=args.json, show_findings=False)


def _serial(value: str) -> str:
    """Ansible's serial: a count (>= 1) or a percentage like 25%."""
    text = value.strip()
    number = text[:-1] if text.endswith("%") else text
    if not number.isdigit() or int(number) < 1 or (text.endswith("%") and int(number) > 100):
        raise argparse.ArgumentTypeError(f"{value!r}: a host count >= 1 or a percentage 1-100%")
    return text


def _percentage(value: str) -> int:
    if not value.isdigit() or int(value) > 100:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number 0-100")
    return int(value)


def add_update_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, check_flag=True)
    parser.add_argument(
        "--serial",
        type=_serial,
        help="hosts updated at a time: a count or a percentage (default 1)",
    )
    parser.add_argument(
        "--max-fail-percentage",
        type=_percentage,
        help="failed hosts (%%) a batch may have before the rollout stops (default 0)",
    )


def add_rollback_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, check_flag=True)
    parser.add_argument("--serial", type=_serial, help="hosts rolled back at a time (default 1)")


def cmd_update(args: argparse.Namespace, ctx: Context) -> int:
    return _rollout_run(args, ctx, "update", "update.yml")


def cmd_rollback(args: argparse.Namespace, ctx: Context) -> int:
    return _rollout_run(args, ctx, "rollback", "rollback.yml")


# ---- drift (gpuhost check --fail-on-drift) -------------------------------------------


def drift_by_host(report: dict) -> dict[str, list[dict]]:
    """What differs from the inventory, per host: the tasks check mode would change."""
    if not report.get("check"):
        raise GpuhostError("drift is only defined for a check-mode run")
    drift: dict[str, list[dict]] = {host: [] for host in sorted(report["hosts"])}
    for change in report["changed_tasks"]:
        drift.setdefault(change["host"], []).append(
            {"task": change["task"], "diff": change.get("diff")}
        )
    return drift


def print_drift(console: Console, drift: dict[str, list[dict]]) -> None:
    """One line per host, doctor style: DRIFT with the differing tasks, or OK."""
    console.print(Text("Drift (check-mode diff against the inventory):", style="bold"))
    width = max((len(host) for host in drift), default=0)
    for host, items in drift.items():
        if items:
            line = Text.assemble(
                ("DRIFT", "bold red"),
                f"  {host:<{width}}  {len(items)} difference(s) from the "
                "inventory: " + "; ".join(i["task"] for i in items),
            )
        else:
            line = Text.assemble(("OK   ", "green"), f"  {host:<{width}}  matches the inventory")
        console.print(line, soft_wrap=True)


def apply_drift(report: dict, *, fail_on_drift: bool) -> bool:
    """Add report["drift"] and rewrite report.json; with fail_on_drift any drift fails the
    run (exit 1). Returns whether any host drifted."""
    report["drift"] = drift_by_host(report)
    drifted = any(report["drift"].values())
    if fail_on_drift and drifted and report["status"] == "successful":
        report["status"] = "failed"
        report["error"] = "drift from the inventory on: " + ", ".join(
            host for host, items in report["drift"].items() if items
        )
    record.write_report(record.RunDir(Path(report["run_dir"])), report)
    return drifted


COMMANDS = [
    Command(
        "update",
        "roll a config change across hosts one batch at a time: drain, restart, health and "
        "correctness gate, rejoin; a failing host is rolled back and stops the rollout",
        add_update_arguments,
        cmd_update,
    ),
    Command(
        "rollback",
        "restore each host's previous known-good server config (the one before the last "
        "update), host by host, drained and health-gated",
        add_rollback_arguments,
        cmd_rollback,
    ),
]
