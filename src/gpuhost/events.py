"""Turn ansible-runner events into what gpuhost reports: counts, failures, changes, facts.

Facts (gpuhost_findings, gpuhost_reboot_required) are read from the results in the event
stream rather than from the jsonfile fact cache: ansible-core 2.19 writes that cache as a
tagged payload only its own deserializer reads, while event results are plain JSON.
"""

from __future__ import annotations

import difflib
import json
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

COUNTERS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")
# playbook_on_stats names two counters differently from the recap.
_STATS_KEYS = {"failures": "failed", "dark": "unreachable"}
FINDINGS_FACT = "gpuhost_findings"
REBOOT_FACT = "gpuhost_reboot_required"
_DIFF_LINES_MAX = 400
# The job events that carry a warning for the person running the playbook: Ansible's own
# ([WARNING]: ..., [DEPRECATION WARNING]: ...) and those of the gpuhost plugins
# (gpuhost_validate: a misspelt variable). Their text is the event's stdout. A warning that
# a task's action plugin gives (in a worker) comes as a `verbose` event whose stdout starts
# with [WARNING]:, the controller's own as a `warning` event.
WARNING_EVENTS = ("warning", "deprecated", "system_warning")
# Notices the gpuhost plugins print as plain lines (Display.display, a `verbose` event) that
# change what the run does: a person must see them as plainly as a warning.
NOTICE_MARKS = ("auto picked no profile",)
_WARNING_PREFIX = re.compile(r"^\[(?:DEPRECATION )?WARNING\]:\s*")
_NO_PATTERN_MATCH = "Could not match supplied host pattern, ignoring: "


@dataclass
class TaskIssue:
    host: str
    task: str
    message: str
    play: str = ""

    def as_dict(self) -> dict:
        return {"host": self.host, "task": self.task, "play": self.play, "message": self.message}


@dataclass
class TaskChange:
    host: str
    task: str
    diff: str | None = None

    def as_dict(self) -> dict:
        return {"host": self.host, "task": self.task, "diff": self.diff}


@dataclass
class EventCollector:
    """Fed from ansible-runner's thread, read by the report (the display keeps its own state)."""

    play: str = ""
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    final_stats: dict[str, dict[str, int]] | None = None
    failed: list[TaskIssue] = field(default_factory=list)
    unreachable: list[TaskIssue] = field(default_factory=list)
    changed: list[TaskChange] = field(default_factory=list)
    findings: dict[str, list] = field(default_factory=dict)
    reboot: dict[str, bool] = field(default_factory=dict)
    handler_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # once each, in the order they came
    output_tail: deque = field(default_factory=lambda: deque(maxlen=60))
    listeners: list[Callable[[str, dict], None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, event: dict) -> bool:
        """ansible-runner's event_handler. Returns True so the event is kept in artifacts.

        An exception here would kill the runner thread mid-run, so it is recorded instead.
        """
        try:
            with self.lock:
                self._apply(event)
            data = event.get("event_data") or {}
            if event.get("event") == "verbose":
                # Lines an action plugin prints while it waits (the download's progress).
                data = {**data, "stdout": event.get("stdout") or ""}
            for listener in self.listeners:
                listener(event.get("event", ""), data)
        except Exception as exc:
            self.handler_errors.append(f"{type(exc).__name__}: {exc}")
        return True

    def _apply(self, event: dict) -> None:
        name = event.get("event", "")
        data = event.get("event_data") or {}
        if event.get("stdout"):
            self.output_tail.extend(event["stdout"].splitlines())
        if is_warning(name, event.get("stdout") or ""):
            self.add_warning(event.get("stdout") or "")
        if name == "playbook_on_play_start":
            self.play = data.get("play", "")
        elif name == "playbook_on_stats":
            self.final_stats = _stats_by_host(data)
        elif name.startswith("runner_on_") and data.get("host"):
            self._apply_result(name, data)

    def _apply_result(self, name: str, data: dict) -> None:
        host = data["host"]
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        counts = self.counts.setdefault(host, dict.fromkeys(COUNTERS, 0))
        task = task_label(data)
        if name == "runner_on_ok":
            counts["ok"] += 1
            if res.get("changed"):
                counts["changed"] += 1
                self.changed.append(TaskChange(host, task, render_diff(_diffs(res))))
            self._apply_facts(host, res)
        elif name == "runner_on_failed":
            if data.get("ignore_errors"):
                counts["ignored"] += 1
            else:
                counts["failed"] += 1
                self.failed.append(TaskIssue(host, task, result_message(res), self.play))
        elif name == "runner_on_unreachable":
            counts["unreachable"] += 1
            self.unreachable.append(TaskIssue(host, task, result_message(res), self.play))
        elif name == "runner_on_skipped":
            counts["skipped"] += 1

    def _apply_facts(self, host: str, res: dict) -> None:
        for result in with_items(res):
            facts = result.get("ansible_facts")
            if result.get("reboot_required") is True:
                self.reboot[host] = True
            if not isinstance(facts, dict):
                continue
            if FINDINGS_FACT in facts:
                self.findings[host] = facts[FINDINGS_FACT]
            if REBOOT_FACT in facts:
                # A later fact of false (after a reboot handler) clears the flag.
                self.reboot[host] = facts[REBOOT_FACT] in (True, "true", "True", "yes")

    def add_warning(self, text: str) -> None:
        """One warning, without Ansible's [WARNING]: prefix; a repeat is dropped."""
        text = _WARNING_PREFIX.sub("", str(text).strip()).strip()
        if text and text not in self.warnings:
            self.warnings.append(text)

    def host_stats(self) -> dict[str, dict[str, int]]:
        """Ansible's own recap when the play finished, else the live counts."""
        if self.final_stats is not None:
            return self.final_stats
        return {host: dict(counts) for host, counts in self.counts.items()}


def is_warning(name: str, stdout: str) -> bool:
    """Whether a job event is a warning (or a notice) a person must see."""
    if name in WARNING_EVENTS:
        return True
    return name == "verbose" and bool(
        _WARNING_PREFIX.match(stdout.lstrip()) or any(m in stdout for m in NOTICE_MARKS)
    )


def condensed_warnings(warnings: list[str]) -> list[str]:
    """The warnings as a person reads them: Ansible's one line per host pattern that matched
    nothing (site.yml's plays for routers, monitoring, ... on an inventory without them)
    become one line naming the patterns."""
    mark = _NO_PATTERN_MATCH
    patterns = [w.removeprefix(mark) for w in warnings if w.startswith(mark)]
    out = [w for w in warnings if not w.startswith(_NO_PATTERN_MATCH)]
    if patterns:
        out.insert(
            0,
            "no host of the inventory (within --limit) is in: "
            + ", ".join(patterns)
            + " (the plays for them did nothing)",
        )
    return out


def task_label(data: dict) -> str:
    task = data.get("task") or data.get("task_action") or "?"
    role = data.get("role")
    return f"{role} : {task}" if role else task


def with_items(res: dict) -> list[dict]:
    """A result followed by its loop items' results (a looped task reports per item)."""
    items = res.get("results")
    return [res, *(r for r in items if isinstance(r, dict))] if isinstance(items, list) else [res]


def _stats_by_host(data: dict) -> dict[str, dict[str, int]]:
    hosts: dict[str, dict[str, int]] = {}
    for host in data.get("processed") or {}:
        hosts[host] = dict.fromkeys(COUNTERS, 0)
    for key in (*COUNTERS, *_STATS_KEYS):
        for host, value in (data.get(key) or {}).items():
            hosts.setdefault(host, dict.fromkeys(COUNTERS, 0))[_STATS_KEYS.get(key, key)] = value
    return hosts


def _last_lines(text: object, count: int) -> str:
    lines = [line for line in str(text or "").strip().splitlines() if line.strip()]
    return "\n".join(lines[-count:])


def result_message(res: dict) -> str:
    """The one message a person needs from a failed or unreachable result."""
    if res.get("censored"):
        return str(res["censored"])
    for item in with_items(res)[1:]:
        if item.get("failed") or item.get("unreachable"):
            label = item.get("_ansible_item_label", item.get("item"))
            label = json.dumps(label) if not isinstance(label, str) else label
            return f"item {label[:80]}: {result_message(item)}"
    msg = res.get("msg") or res.get("reason") or ""
    # assert's fail_msg may be a list (one item per failed check): one line each.
    msg = "\n".join(map(str, msg)) if isinstance(msg, list) else str(msg).strip()
    parts = [msg] if msg else []
    # stderr says why a command failed; a module crash's last stderr line names the error.
    for key, count in (("stderr", 3), ("module_stderr", 1)):
        tail = _last_lines(res.get(key), count)
        if tail and tail not in msg:
            parts.append(tail)
    if not parts and res.get("stdout"):
        parts.append(_last_lines(res["stdout"], 3))
    return "\n".join(parts) or "no message in the result"


def _diffs(res: dict) -> list:
    found = []
    for result in with_items(res):
        diff = result.get("diff")
        if isinstance(diff, dict):
            found.append(diff)
        elif isinstance(diff, list):
            found.extend(d for d in diff if isinstance(d, dict))
    return found


def _as_lines(value: object) -> list[str]:
    if isinstance(value, str):
        return value.splitlines(keepends=True)
    return [line + "\n" for line in json.dumps(value, indent=2, sort_keys=True).splitlines()]


def render_diff(diffs: list[dict]) -> str | None:
    """Unified text for --check --diff results; capped so a template diff stays readable."""
    chunks: list[str] = []
    for diff in diffs:
        if diff.get("prepared"):
            chunks.append(str(diff["prepared"]).rstrip("\n") + "\n")
            continue
        if "before" not in diff and "after" not in diff:
            continue
        lines = difflib.unified_diff(
            _as_lines(diff.get("before", "")),
            _as_lines(diff.get("after", "")),
            fromfile=str(diff.get("before_header", "before")),
            tofile=str(diff.get("after_header", "after")),
        )
        chunks.append("".join(line if line.endswith("\n") else line + "\n" for line in lines))
    text = "".join(chunks).rstrip("\n")
    lines = text.splitlines()
    if len(lines) > _DIFF_LINES_MAX:
        text = "\n".join([*lines[:_DIFF_LINES_MAX], f"... ({len(lines) - _DIFF_LINES_MAX} more)"])
    return text or None
