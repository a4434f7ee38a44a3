"""Preflight findings (the cacheable fact gpuhost_findings): normalize and print them.

`gpuhost check` prints them today; `gpuhost verify` reuses print_findings. The schema is
in docs/facts.md: a list of {check, status: pass|warn|fail, message, fix}.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from gpuhost.plugin_code import module_utils

# The shape and the statuses the plugins make findings with (module_utils/gpuhost_finding.py).
_finding = module_utils("gpuhost_finding")
STATUSES = _finding.STATUSES
# What a template renders for an absent fix (`{{ none }}` is "None" in a string field).
_NO_FIX = ("", "none", "null", "-", "n/a")
_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def normalize(raw: object) -> list[dict]:
    """One host's fact as a list of well-formed findings.

    A malformed entry is a bug in whatever produced it; it becomes a fail finding that says
    so rather than being dropped, so a broken preflight can never read as a clean one.
    """
    if not isinstance(raw, list):
        raw = [raw]
    findings = []
    for entry in raw:
        if not isinstance(entry, dict) or entry.get("status") not in STATUSES:
            findings.append(
                _finding.finding(
                    "findings",
                    "fail",
                    f"malformed finding: {entry!r}"[:300],
                    "report this to the author of the preflight check",
                )
            )
            continue
        findings.append(
            _finding.finding(
                str(entry.get("check") or "?"),
                entry["status"],
                str(entry.get("message") or ""),
                fix_of(entry),
            )
        )
    return findings


def fix_of(entry: dict) -> str:
    """A finding's fix, or "" when it has none (None, or the text a template made of it)."""
    fix = entry.get("fix")
    text = "" if fix is None else str(fix).strip()
    return "" if text.lower() in _NO_FIX else text


def normalize_all(by_host: dict[str, object]) -> dict[str, list[dict]]:
    return {host: normalize(raw) for host, raw in sorted(by_host.items())}


def failed_count(by_host: dict[str, list[dict]]) -> int:
    return sum(f["status"] == "fail" for findings in by_host.values() for f in findings)


def print_findings(console: Console, by_host: dict[str, list[dict]]) -> int:
    """One line per finding, doctor style; returns how many failed."""
    width = max((len(host) for host in by_host), default=0)
    for host, findings in by_host.items():
        for finding in findings:
            status = finding["status"]
            line = Text.assemble(
                (f"{status.upper():<4}", _STYLE[status]),
                f"  {host:<{width}}  {finding['check']}: {finding['message']}",
            )
            if finding["fix"] and status != "pass":
                line.append(f" (fix: {finding['fix']})", style="dim")
            console.print(line, soft_wrap=True)
    return failed_count(by_host)
