"""Progress while a playbook runs, on stderr (stdout stays for the summary and --json).

On a terminal (`live`): a rich Live display, one updating line per host: the stage (the
play), tasks done of the play's total, how long the current task has run, the current task
and, for a long wait, its own progress (a download's bytes and a server start's phase as the
wait plugins print them, a task's retries, an async job's polls). Changed, failed and
unreachable tasks are printed above it as they happen; `-v` also prints every task.

Elsewhere (`lines`: CI logs, pipes): the same events as plain lines, no cursor movement: the
plays, changed/failed/unreachable tasks, the long waits' progress (retries at most once a
minute per host), and with `-v` every task. `off` (--json) prints nothing.

The play totals come from `ansible-playbook --list-tasks` (listing.py), read in a thread of
its own in live mode while the run starts; tasks of dynamic includes are not in them, so a
count may pass its total (shown as `12/10+`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from gpuhost.events import EventCollector, result_message, task_label

_RESULTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")
_TASK_STARTS = ("playbook_on_task_start", "playbook_on_handler_task_start")
# What the wait plugins print (gpuhost_download_wait, gpuhost_sglang_wait): "[host] text".
_HOST_LINE = re.compile(r"^\[(?P<host>[^\]]+)\] (?P<text>.+)$")
_RETRY_LINE_EVERY_S = 60.0


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class HostLine:
    play_uuid: str = ""
    play: str = ""
    total: int | None = None
    done: int = 0
    task: str = ""
    task_started: float = 0.0
    detail: str = ""
    failed: bool = False
    last_retry_line: float = 0.0


class Progress:
    """Context manager around one run; `mode` is live, lines or off."""

    def __init__(
        self,
        collector: EventCollector,
        console: Console,
        title: str,
        mode: str,
        verbose: int = 0,
    ):
        self.console = console
        self.title = title
        self.mode = mode
        self.verbose = verbose
        self.hosts: dict[str, HostLine] = {}
        self.play = ""
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._spinner = Spinner("dots")
        self._get_plan: Callable[[], list[tuple[str, int]] | None] | None = None
        self._totals: list[tuple[str, int]] | None = None
        self._cursor = -1
        self._play_total: int | None = None
        if mode != "off":
            collector.listeners.append(self.on_event)

    @classmethod
    def choose_mode(cls, console: Console, quiet: bool) -> str:
        if quiet:
            return "off"
        return "live" if console.is_terminal else "lines"

    def use_plan(self, get_plan: Callable[[], list[tuple[str, int]] | None]) -> None:
        """How to get each play's task count; only the live display calls it."""
        self._get_plan = get_plan

    def read_plan(self) -> None:
        totals = self._get_plan() if self._get_plan else None
        with self._lock:
            self._totals = totals
            self._find_play_total()

    def __enter__(self) -> Progress:
        self.started = time.monotonic()
        if self.mode == "live":
            if self._get_plan is not None:
                threading.Thread(target=self.read_plan, name="task-totals", daemon=True).start()
            self._live = Live(
                get_renderable=self.render,
                console=self.console,
                refresh_per_second=4,
                transient=True,
            )
            self._live.start()
        elif self.mode == "lines":
            self._say(Text(self.title, style="bold"))
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _say(self, text: Text) -> None:
        target = self._live.console if self._live is not None else self.console
        target.print(text, soft_wrap=True)

    # ---- events (called from ansible-runner's thread) -----------------------------------

    def on_event(self, name: str, data: dict) -> None:
        with self._lock:
            lines = self._apply(name, data)
        for line in lines:
            self._say(line)

    def _find_play_total(self) -> None:
        """The current play's total: the next listed play of that name (plays run in order;
        a `serial` play starts once per batch under the same name)."""
        self._play_total = None
        if not self._totals or not self.play:
            return
        names = [n for n, _ in self._totals]
        if 0 <= self._cursor < len(names) and names[self._cursor] == self.play:
            self._play_total = self._totals[self._cursor][1]
            return
        for index in [*range(self._cursor + 1, len(names)), *range(0, self._cursor + 1)]:
            if names[index] == self.play:
                self._cursor = index
                self._play_total = self._totals[index][1]
                return

    def _apply(self, name: str, data: dict) -> list[Text]:
        out: list[Text] = []
        host = data.get("host") or ""
        now = time.monotonic()
        if name == "playbook_on_play_start":
            self.play = data.get("play") or data.get("name") or ""
            self._find_play_total()
            if self.mode == "lines" or self.verbose:
                out.append(Text(f"PLAY [{self.play}]", style="bold"))
        elif name in _TASK_STARTS and self.verbose:
            out.append(Text(f"TASK [{task_label(data)}]", style="dim"))
        elif name == "runner_on_start" and host:
            line = self.hosts.setdefault(host, HostLine())
            if line.play_uuid != data.get("play_uuid", ""):
                line.play_uuid, line.play, line.done = data.get("play_uuid", ""), self.play, 0
            line.total = self._play_total
            line.task, line.task_started, line.detail = task_label(data), now, ""
        elif name in _RESULTS and host:
            out += self._result(name, host, data)
        elif name == "runner_retry" and host:
            res = data.get("res") if isinstance(data.get("res"), dict) else {}
            line = self.hosts.setdefault(host, HostLine())
            line.detail = f"retry {res.get('attempts', '?')} of {res.get('retries', '?')}"
            if self.mode == "lines" and now - line.last_retry_line >= _RETRY_LINE_EVERY_S:
                line.last_retry_line = now
                out.append(Text(f"waiting: [{host}] {task_label(data)}: {line.detail}"))
        elif name == "runner_on_async_poll" and host:
            line = self.hosts.setdefault(host, HostLine())
            line.detail = f"async job running ({duration(now - line.task_started)})"
        elif name == "verbose":
            match = _HOST_LINE.match((data.get("stdout") or "").strip())
            # Only hosts of this run: other "[x] ..." output is not a host's progress.
            if match and match.group("host") in self.hosts:
                self.hosts[match.group("host")].detail = match.group("text")
                if self.mode == "lines":
                    out.append(Text(f"waiting: {match.group(0)}", style="dim"))
        return out

    def _result(self, name: str, host: str, data: dict) -> list[Text]:
        line = self.hosts.setdefault(host, HostLine(play=self.play))
        line.done += 1
        line.detail = ""
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        label = task_label(data)
        if name == "runner_on_failed" and not data.get("ignore_errors"):
            line.failed = True
            return [Text(f"failed: [{host}] {label}: {result_message(res)}", style="red")]
        if name == "runner_on_unreachable":
            line.failed = True
            return [Text(f"unreachable: [{host}] {result_message(res)}", style="red")]
        if name == "runner_on_ok" and res.get("changed"):
            return [Text(f"changed: [{host}] {label}", style="yellow")]
        if self.verbose:
            word = {"runner_on_skipped": "skipped", "runner_on_failed": "failed (ignored)"}
            return [Text(f"{word.get(name, 'ok')}: [{host}] {label}", style="dim")]
        return []

    # ---- the live display ----------------------------------------------------------------

    def render(self) -> Group:
        now = time.monotonic()
        self._spinner.text = Text.assemble(
            (f"{self.title} ", "bold"), (duration(now - self.started), "dim")
        )
        with self._lock:
            rows = [(host, HostLine(**vars(line))) for host, line in sorted(self.hosts.items())]
        if not rows:
            self._spinner.text.append("  starting ansible-playbook")
            return Group(self._spinner)
        table = Table(box=None, padding=(0, 1), header_style="bold", show_edge=False)
        table.add_column("host", no_wrap=True)
        table.add_column("stage", no_wrap=True, max_width=28, overflow="ellipsis")
        table.add_column("tasks", justify="right", no_wrap=True)
        table.add_column("time", justify="right", no_wrap=True)
        table.add_column("current task", no_wrap=True, overflow="ellipsis")
        for host, line in rows:
            if line.total is None:
                count = str(line.done)
            else:
                count = f"{line.done}/{line.total}" + ("+" if line.done > line.total else "")
            current = Text(line.task)
            if line.detail:
                current.append(f"  {line.detail}", style="cyan")
            table.add_row(
                Text(host, style="red" if line.failed else ""),
                line.play,
                count,
                duration(now - line.task_started) if line.task_started else "",
                current,
            )
        return Group(self._spinner, table)
