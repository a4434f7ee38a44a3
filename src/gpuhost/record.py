"""The run record's contents: report.json built from a run's outcome, redaction of what the
record keeps, and the scrub of ansible-runner's inputs (the layout: rundir.py)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from gpuhost import __version__, findings
from gpuhost.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from gpuhost.redaction import REDACTED, Scrubber, is_secret_name, redact
from gpuhost.rundir import RunDir

if TYPE_CHECKING:
    from gpuhost.project import Project
    from gpuhost.runner import RunOutcome, RunRequest

REPORT_SCHEMA = 1
STATUS_EXIT = {
    "successful": EXIT_OK,
    "failed": EXIT_FAILED,
    "unreachable": EXIT_FAILED,
    "error": EXIT_USAGE,
    "canceled": EXIT_INTERRUPTED,
}


def redact_vars(variables: dict[str, object]) -> dict[str, object]:
    """Variables a user typed (-e): every value of a secret name is one, at any depth."""
    return redact(variables, scalars=True)


def _redact_extra_var(value: str) -> str:
    if value.lstrip().startswith("{"):
        try:
            return json.dumps(redact_vars(json.loads(value)))
        except (ValueError, AttributeError):
            return REDACTED
    key, sep, _ = value.partition("=")
    return f"{key}={REDACTED}" if sep and is_secret_name(key) else value


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as recorded: -e values of secret-looking names are hidden."""
    out: list[str] = []
    value_next = False
    for arg in argv:
        if value_next:
            out.append(_redact_extra_var(arg))
            value_next = False
        elif arg in ("-e", "--extra-vars"):
            out.append(arg)
            value_next = True
        elif arg.startswith("--extra-vars="):
            out.append("--extra-vars=" + _redact_extra_var(arg.removeprefix("--extra-vars=")))
        elif arg.startswith("-e") and not arg.startswith("--"):
            out.append("-e" + _redact_extra_var(arg[2:]))
        else:
            out.append(arg)
    return out


def scrub_artifacts(run_dir: RunDir, scrubber: Scrubber) -> None:
    """Once ansible-runner is done: every file of the run (stdout, job events, the fact
    cache, partial events a killed run left) loses the secrets it quotes (Scrubber.files).
    ansible-runner itself never got a secret to write (handover.py)."""
    scrubber.files(run_dir.path)


def _error_excerpt(lines: list[str]) -> str:
    """Ansible's own error when the run never reached a host (syntax, no hosts matched)."""
    for index, line in enumerate(lines):
        if line.startswith(("[ERROR]", "ERROR!")):
            return "\n".join(x for x in lines[index : index + 6] if x.strip())
    warnings = [line for line in lines if line.startswith("[WARNING]")]
    return "\n".join(warnings[-4:])


_TRACEBACK = "Traceback (most recent call last):"
_CRASH_LINES = 12


def crash_excerpt(text: str) -> str:
    """What ansible-playbook printed when it ended without an event: the traceback's
    exception line (the last line of a traceback) with the frames just above it, else the
    output's last lines."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if any(_TRACEBACK in line for line in lines):
        start = max(i for i, line in enumerate(lines) if _TRACEBACK in line)
        frames = lines[start + 1 :]
        tail = frames[-(_CRASH_LINES - 1) :]
        return "\n".join([lines[start], *(["  ..."] if len(frames) > len(tail) else []), *tail])
    return "\n".join(lines[-_CRASH_LINES:])


def _artifact_output(run_dir: RunDir) -> str:
    """ansible-playbook's own output (stdout and stderr artifacts), for a run that left no
    event to read it from."""
    texts = []
    for name in ("stdout", "stderr"):
        path = run_dir.runner_dir / "artifacts" / "ansible" / name
        try:
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


def _no_task_ran(tail: list[str], rc: int, output: str) -> str:
    """Why no host ran a task: Ansible's error (it names the file and line of a YAML
    error), else the crash (a traceback, or the last output), else the likely causes."""
    why = _error_excerpt(tail)
    if why.startswith(("[ERROR]", "ERROR!")):
        return why
    crash = crash_excerpt(output) if not tail or _TRACEBACK in output else ""
    if crash:
        return f"ansible-playbook ended (rc={rc}) without running a task; its output ends:\n{crash}"
    hint = "no host ran a task: check the inventory, --limit and --tags"
    return f"{why}\n{hint}" if why else hint


def run_status(report: dict, outcome: RunOutcome, output: str = "") -> tuple[str, str | None]:
    """Status from the results; `error` means Ansible never ran a task on any host.
    `output`: ansible-playbook's own output (the artifacts), read for a run without events."""
    if outcome.interrupted:
        if outcome.interrupted_by in ("", "SIGINT"):
            return "canceled", "interrupted by the user"
        return "canceled", f"stopped by {outcome.interrupted_by}"
    if report["failed_tasks"] or findings.failed_count(report["findings"]):
        return "failed", None
    if report["unreachable"]:
        return "unreachable", None
    tail = list(outcome.collector.output_tail)
    if not report["hosts"]:
        return "error", _no_task_ran(tail, outcome.rc, output)
    if outcome.rc != 0:
        why = _error_excerpt(tail)
        if not why and _TRACEBACK in output:
            why = f"ansible-playbook crashed (rc={outcome.rc}):\n{crash_excerpt(output)}"
        why = why or f"ansible-playbook exited with rc={outcome.rc}"
        return "failed", why
    return "successful", None


def build_report(
    project: Project,
    request: RunRequest,
    outcome: RunOutcome,
    run_dir: RunDir,
    argv: list[str],
) -> dict:
    collector = outcome.collector
    hosts = collector.host_stats()
    # A failure inside a block with `rescue` still emits a failed event; the recap is truth.
    failed = [i for i in collector.failed if hosts.get(i.host, {}).get("failed", 1) > 0]
    unreachable = [i for i in collector.unreachable if hosts.get(i.host, {}).get("unreachable", 1)]
    report: dict = {
        "schema": REPORT_SCHEMA,
        "gpuhost_version": __version__,
        "command": request.command,
        "status": None,  # set below from the results; kept near the top for readers
        "error": None,
        "argv": redact_argv(argv),
        "project_dir": str(project.root),
        "playbook": str(request.playbook),
        "inventory": [str(p) for p in request.inventories],
        "limit": request.limit,
        "tags": request.tags,
        "skip_tags": request.skip_tags,
        "check": request.check,
        "extra_vars": redact_vars(request.extra_vars),
        "started_at": outcome.started_at.isoformat(timespec="seconds"),
        "finished_at": outcome.finished_at.isoformat(timespec="seconds"),
        "duration_s": outcome.duration_s,
        "rc": outcome.rc,
        "hosts": hosts,
        "failed_tasks": [i.as_dict() for i in failed],
        "unreachable": [i.as_dict() for i in unreachable],
        "changed_tasks": [c.as_dict() for c in collector.changed],
        "reboot_required": sorted(h for h, needed in collector.reboot.items() if needed),
        "findings": findings.normalize_all(collector.findings),
        "run_dir": str(run_dir.path),
        "artifacts": str(run_dir.runner_dir / "artifacts"),
    }
    output = _artifact_output(run_dir) if not hosts or outcome.rc not in (0, 2, 4) else ""
    if unreachable:
        hints = _address_hints(request, [i.host for i in unreachable])
        for item in report["unreachable"]:
            if item["host"] in hints:
                item["hint"] = hints[item["host"]]
    report["status"], report["error"] = run_status(report, outcome, output)
    report["warnings"] = list(collector.warnings)
    if collector.handler_errors:
        report["internal_errors"] = collector.handler_errors[:10]
    return report


def _address_hints(request: RunRequest, hosts: list[str]) -> dict[str, str]:
    """inventory.address_hints, never failing a report (the run itself read the inventory)."""
    from gpuhost import inventory

    try:
        return inventory.address_hints(request.inventories, hosts)
    except Exception:
        return {}


def write_report(run_dir: RunDir, report: dict) -> None:
    """report.json, by every writer (run, bench, doctor, update, rebuild): a value that a
    secret's name holds is redacted at any depth (the facts it carries, a finding's data)."""
    report = redact(report)
    tmp = run_dir.report_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir.report_path)
    _point_latest(run_dir)


def _point_latest(run_dir: RunDir) -> None:
    """runs/latest -> the newest run, for `gpuhost report` and for people."""
    link = run_dir.path.parent / "latest"
    tmp = run_dir.path.parent / f".latest.{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_dir.path.name)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)  # a convenience only; the run record itself is complete
