"""Live progress while a playbook runs: current task and per-host counts.

On a terminal this is a rich Live panel on stderr (stdout stays for the summary and --json);
elsewhere (CI logs, pipes) it falls back to one plain line per task and per problem.
"""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from gpuhost.events import EventCollector, result_message, task_label

LIVE_COUNTERS = ("ok", "changed", "failed", "unreachable", "skipped")
_STYLE = {"changed": "yellow", "failed": "red", "unreachable": "red", "ok": "green"}


class Progress:
    """Context manager around one run; `mode` is live, lines or off."""

    def __init__(self, collector: EventCollector, console: Console, title: str, mode: str):
        self.collector = collector
        self.console = console
        self.title = title
        self.mode = mode
        self._live: Live | None = None
        self._spinner = Spinner("dots")
        if mode != "off":
            collector.listeners.append(self.on_event)

    @classmethod
    def choose_mode(cls, console: Console, quiet: bool) -> str:
        if quiet:
            return "off"
        return "live" if console.is_terminal else "lines"

    def __enter__(self) -> Progress:
        if self.mode == "live":
            self._live = Live(
                get_renderable=self._render,
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

    def on_event(self, name: str, data: dict) -> None:
        """Called from ansible-runner's thread for every event."""
        host = data.get("host", "")
        if name == "runner_on_failed" and not data.get("ignore_errors"):
            message = result_message(data.get("res") or {})
            self._say(Text(f"failed: [{host}] {task_label(data)}: {message}", style="red"))
        elif name == "runner_on_unreachable":
            message = result_message(data.get("res") or {})
            self._say(Text(f"unreachable: [{host}] {message}", style="red"))
        elif self.mode == "lines" and name == "playbook_on_play_start":
            self._say(Text(f"PLAY [{data.get('play', '')}]"))
        elif self.mode == "lines" and name in (
            "playbook_on_task_start",
            "playbook_on_handler_task_start",
        ):
            self._say(Text(f"TASK [{task_label(data)}]"))

    def _render(self) -> Group:
        play, task, started, counts = self.collector.snapshot()
        elapsed = f" ({time.monotonic() - started:.0f}s)" if started else ""
        self._spinner.text = Text.assemble(
            (f"{self.title} ", "bold"),
            f"PLAY [{play}] " if play else "",
            f"TASK [{task}]{elapsed}" if task else "starting ansible-playbook",
        )
        table = Table(box=None, padding=(0, 2), header_style="bold")
        table.add_column("host")
        for name in LIVE_COUNTERS:
            table.add_column(name, justify="right")
        for host in sorted(counts):
            row = counts[host]
            table.add_row(
                host,
                *(
                    Text(str(row[c]), style=_STYLE.get(c, "") if row[c] else "")
                    for c in LIVE_COUNTERS
                ),
            )
        return Group(self._spinner, table) if counts else Group(self._spinner)
