"""`gpuhost doctor -i INV`: read-only health checks of the serving hosts.

Runs playbooks/doctor.yml, always in check mode (nothing on a host can change), through the
same run record, progress and summary as every other command. The findings (the cacheable
fact gpuhost_findings: role doctor's `doctor.*` and role verify's `verify.*`) are printed the
way `gpuhost check` prints them; any FAIL exits 1 (record.build_report marks the run failed).
report.md is written beside report.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.text import Text

from gpuhost import record, report, rundir, runfacts
from gpuhost.commands import base

NAME = "doctor"
HELP = (
    "read-only health checks: Xid, memory errors, clocks, power, PCIe, versions, foreign "
    "GPU processes, the server's journal, drift, disk, known answers"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base.add_run_arguments(parser, check_flag=False)


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    base.default_playbook(args, ctx, "doctor.yml")
    request = base.request_from_args(args, ctx, NAME)
    request.check = True  # read-only by construction, whatever the playbook holds
    rep = base.execute(ctx, request, json_output=args.json)
    # report.md beside report.json: the findings per host, as `gpuhost report` renders them.
    run_dir = Path(rep["run_dir"])
    rep["report_md"] = str(report.write(runfacts.load_run(run_dir)))
    record.write_report(rundir.RunDir(run_dir), rep)
    code = base.emit(ctx, rep, json_output=args.json, show_findings=True)
    if not args.json:
        ctx.out.print(Text(f"Report: {rep['report_md']}", style="dim"))
    return code
