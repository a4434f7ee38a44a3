"""The end-of-run summary on stdout: per-host table, then what a person must act on, and the
views of single commands (drift, rollout, verification, bench)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuhost import bench, findings, gpu_profile, rollout
from gpuhost.events import COUNTERS, condensed_warnings
from gpuhost.report import bench_points
from gpuhost.runfacts import Run

_STYLE = {"changed": "yellow", "failed": "red", "unreachable": "red", "ok": "green"}
_DIFF_STYLE = {"+": "green", "-": "red", "@": "cyan"}
# A diff longer than this is cut on screen; report.json keeps it whole.
_DIFF_SCREEN_LINES = 40


def _indented(console: Console, text: str, indent: str, style: str = "") -> None:
    for line in text.splitlines() or [""]:
        console.print(Text(indent + line, style=style), soft_wrap=True)


def report_table(title: str) -> Table:
    """The light, edgeless table the run summaries use (hosts, rollout): it stays readable in
    an 80-column log."""
    return Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
    )


def print_host_table(console: Console, hosts: dict[str, dict[str, int]]) -> None:
    # An unwrapped host column keeps host names whole.
    table = report_table("Hosts")
    table.add_column("host", no_wrap=True, min_width=max(map(len, hosts), default=4))
    for name in COUNTERS:
        table.add_column(name, justify="right")
    for host, row in sorted(hosts.items()):
        cells = [
            Text(str(row.get(c, 0)), style=_STYLE.get(c, "") if row.get(c) else "")
            for c in COUNTERS
        ]
        table.add_row(host, *cells)
    console.print(table)


def print_diff(console: Console, diff: str, indent: str) -> None:
    lines = diff.splitlines()
    for line in lines[:_DIFF_SCREEN_LINES]:
        style = "" if line.startswith(("+++", "---")) else _DIFF_STYLE.get(line[:1], "")
        console.print(Text(indent + line, style=style), soft_wrap=True)
    if len(lines) > _DIFF_SCREEN_LINES:
        console.print(
            Text(
                f"{indent}... {len(lines) - _DIFF_SCREEN_LINES} more lines in report.json",
                style="dim",
            )
        )


def print_changes(console: Console, report: dict, *, with_diff: bool) -> None:
    """Per host, the tasks that changed (in check mode: would change, listed for every host).
    In check mode a host whose check did not run to its end is `unknown`, with the reason
    (rollout.unknown_hosts): "nothing" is said only of hosts that were checked whole."""
    by_host: dict[str, list[dict]] = {}
    for change in report["changed_tasks"]:
        by_host.setdefault(change["host"], []).append(change)
    unknown = rollout.unknown_hosts(report) if report["check"] else {}
    if not report["check"] and not by_host:
        console.print(Text("Nothing changed."))
        return
    console.print(
        Text("Would change (check mode):" if report["check"] else "Changed:", style="bold")
    )
    for host in sorted(set(by_host) | set(report["hosts"] if report["check"] else ())):
        changes = by_host.get(host, [])
        if host in unknown:
            more = f"{len(changes)} task(s) so far, the rest " if changes else ""
            line = Text(f"  {host}: {more}unknown: {unknown[host]}", style="bold red")
        elif changes:
            line = Text(f"  {host}: {len(changes)} task(s)", style="yellow")
        else:
            line = Text(f"  {host}: nothing", style="green")
        console.print(line, soft_wrap=True)
        for change in changes:
            console.print(Text(f"    - {change['task']}"), soft_wrap=True)
            if with_diff and change.get("diff"):
                print_diff(console, change["diff"], "        ")


def print_problems(console: Console, report: dict) -> None:
    if report["failed_tasks"]:
        console.print(Text("Failed tasks:", style="bold red"))
        for item in report["failed_tasks"]:
            console.print(
                Text(f"  {item['host']}: task '{item['task']}' failed:", style="red"),
                soft_wrap=True,
            )
            _indented(console, item["message"], "      ")
    if report["unreachable"]:
        console.print(Text("Unreachable hosts:", style="bold red"))
        for item in report["unreachable"]:
            console.print(Text(f"  {item['host']}: unreachable", style="red"), soft_wrap=True)
            _indented(console, item["message"], "      ")
            if item.get("hint"):
                _indented(console, item["hint"], "      ", style="yellow")
    if report.get("error"):
        console.print(Text("Error:", style="bold red"))
        _indented(console, report["error"], "  ")


def print_warnings(console: Console, report: dict) -> None:
    """Every warning the run emitted (Ansible's and the validation's), once each."""
    warnings = condensed_warnings(report.get("warnings") or [])
    if not warnings:
        return
    console.print(Text("Warnings:", style="bold yellow"))
    for text in warnings:
        lines = text.splitlines()
        console.print(Text(f"  - {lines[0]}", style="yellow"), soft_wrap=True)
        if lines[1:]:
            _indented(console, "\n".join(lines[1:]), "    ")


def print_footer(console: Console, report: dict) -> None:
    if report["reboot_required"]:
        hosts = ", ".join(report["reboot_required"])
        console.print(Text(f"Reboot required: {hosts}", style="bold yellow"), soft_wrap=True)
    status = report["status"]
    style = "bold green" if status == "successful" else "bold red"
    mode = " (check mode)" if report["check"] and report["command"] != "check" else ""
    console.print(
        Text.assemble(
            (f"{report['command']}{mode}: {status.upper()}", style),
            f" in {report['duration_s']:.1f}s; record: {report['run_dir']}/report.json",
        ),
        soft_wrap=True,
    )


def print_summary(console: Console, report: dict, *, show_changes: bool) -> None:
    if report["hosts"]:
        print_host_table(console, report["hosts"])
    if show_changes and report["hosts"]:
        print_changes(console, report, with_diff=report["check"])
    print_warnings(console, report)
    print_problems(console, report)


# ---- the views of one command each: check (drift), update/rollback, verify, bench -------

_STATE_STYLE = {
    "updated": "green",
    "unchanged": "green",
    "would_update": "yellow",
    "restored": "yellow",
    "rolled_back": "bold red",
    "failed": "bold red",
    "unknown": "bold red",
    "not_reached": "yellow",
    "no_server": "yellow",
    "would_install": "yellow",
}


def print_rollout(console: Console, section: dict[str, dict]) -> None:
    """gpuhost update/rollback: per host its state and which config it runs; a serving
    group's hosts together (rollout.rollout_section orders them), named in a group column."""
    if not section:
        return
    grouped = any(row.get("group") for row in section.values())
    table = report_table("Rollout")
    table.add_column("host", no_wrap=True)
    if grouped:
        table.add_column("group", no_wrap=True)
    table.add_column("state")
    table.add_column("runs config")
    table.add_column("config hash")
    table.add_column("before")
    table.add_column("changed")
    for host, row in section.items():
        table.add_row(
            host,
            *([row.get("group") or "-"] if grouped else []),
            Text(row["state"], style=_STATE_STYLE.get(row["state"], "")),
            row["runs"],
            row.get("config") or "-",
            row.get("previous") or "-",
            ", ".join(row.get("changed") or []) or "-",
        )
    console.print(table)


def print_drift(console: Console, drift: dict[str, list[dict]], unknown: dict[str, str]) -> None:
    """One line per host, doctor style: DRIFT with the differing tasks, OK, or UNKNOWN with
    why the check cannot say (rollout.unknown_hosts). No host, no section."""
    if not drift:
        return
    console.print(Text("Drift (check-mode diff against the inventory):", style="bold"))
    width = max((len(host) for host in drift), default=0)
    for host, items in drift.items():
        why = unknown.get(host)
        if items:
            line = Text.assemble(
                ("DRIFT  ", "bold red"),
                f"  {host:<{width}}  {len(items)} difference(s) from the "
                "inventory: " + "; ".join(i["task"] for i in items),
            )
            if why:
                line.append(f"; the rest unknown: {why}", style="red")
        elif why:
            line = Text.assemble(("UNKNOWN", "bold red"), f"  {host:<{width}}  {why}")
        else:
            line = Text.assemble(("OK     ", "green"), f"  {host:<{width}}  matches the inventory")
        console.print(line, soft_wrap=True)


def print_verify(console: Console, run: Run) -> None:
    """gpuhost verify: per host its verify findings and the known-answer questions; a host
    where role verify found no server says that, and nothing else."""
    no_server = set(run.report.get("no_server") or [])
    for host in run.hosts:
        if host in no_server:
            console.print(
                Text.assemble(
                    ("NO SERVER", "bold yellow"),
                    f"  no server is installed on {host}: nothing was verified there "
                    "(gpuhost provision installs one; role sglang_server's preflight says why "
                    "it did not)",
                ),
                soft_wrap=True,
            )
            continue
        verify = run.facts.get(host, {}).get("gpuhost_verify")
        if not verify:
            continue
        server = verify.get("server") or {}
        standin = " - STAND-IN server (a test double, not SGLang)" if server.get("standin") else ""
        console.print(Text(f"Verification of {host}{standin}", style="bold"))
        findings.print_findings(console, {host: findings.normalize(verify.get("findings") or [])})
        for q in verify.get("questions") or []:
            mark = (
                Text("pass", style="green") if q.get("passed") else Text("FAIL", style="bold red")
            )
            got = " ".join(str(q.get("error") or q.get("got") or "").split())[:100]
            console.print(
                Text.assemble(
                    "  ", mark, f"  {q.get('prompt')}  expected {q.get('expected')!r}, got {got!r}"
                ),
                soft_wrap=True,
            )


def print_bench(console: Console, host: str, run: Run, data: dict) -> None:
    """gpuhost bench: one host's points and their comparison with the baseline."""
    # What the server said of itself (its /server_info), never a setting.
    standin = any(
        (line.get("server_info") or {}).get("standin") for line in run.bench_lines.get(host) or []
    )
    title = f"bench_serving on {host}" + (
        " (against the STAND-IN, a test double)" if standin else ""
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold")
    for _, name, _ in bench.COLUMNS:
        table.add_column(name, justify="right")
    for point in bench_points(run, host):
        table.add_row(*point.row())
    console.print(table)
    for row in gpu_profile.rows(run.bench_lines.get(host) or []):
        console.print(Text(f"  concurrency {row[0]}: {row[1]} - {row[2]}"), soft_wrap=True)
    comparisons = [
        bench.Comparison(
            **{
                **c,
                "expected_range": tuple(c["expected_range"]) if c.get("expected_range") else None,
            }
        )
        for c in data["comparisons"]
    ]
    if not comparisons:
        console.print(Text("  no baseline point at these lengths and levels", style="dim"))
        return
    table = Table(
        title="against the baseline", title_justify="left", box=box.SIMPLE_HEAD, header_style="bold"
    )
    for name in bench.COMPARISON_HEADER:
        table.add_column(name, justify="right")
    for c in comparisons:
        row = bench.comparison_row(c)
        table.add_row(*row[:-1], Text(row[-1], style="bold red" if c.regression else "green"))
    console.print(table)
