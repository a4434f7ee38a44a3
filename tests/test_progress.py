"""The progress display (src/gpuhost/progress.py) fed with ansible-runner events of the shape
a real run emits (recorded from ansible-core 2.19 through ansible-runner 2.4)."""

from __future__ import annotations

from rich.console import Console

from gpuhost.events import EventCollector
from gpuhost.progress import Progress, duration

PLAY = {"play": "Host base layer", "play_uuid": "p1"}


def events(host: str = "gpu-1") -> list[tuple[str, dict]]:
    task = {**PLAY, "host": host, "task": "Install base packages", "role": "base"}
    wait = {**PLAY, "host": host, "task": "Wait for the server", "role": "sglang_server"}
    return [
        ("playbook_on_play_start", {"play": "Host base layer", "name": "Host base layer"}),
        ("playbook_on_task_start", {"task": "Install base packages", "role": "base"}),
        ("runner_on_start", task),
        ("runner_on_ok", {**task, "res": {"changed": True}}),
        ("runner_on_start", wait),
        ("runner_retry", {**wait, "res": {"attempts": 2, "retries": 60}}),
        ("verbose", {"stdout": f"[{host}] download: 12.3 GiB of ~480 GiB (3 %), 110 MiB/s"}),
    ]


def feed(progress: Progress, items: list[tuple[str, dict]]) -> None:
    for name, data in items:
        progress.on_event(name, data)


def test_live_line_per_host_has_stage_count_time_task_and_wait():
    console = Console(record=True, width=160, force_terminal=False)
    progress = Progress(EventCollector(), console, "gpuhost provision", "live")
    progress.use_plan(lambda: [("Preflight", 5), ("Host base layer", 31)])
    progress.read_plan()  # the live display calls it in a thread
    feed(progress, events())
    console.print(progress.render())
    text = console.export_text()
    row = next(line for line in text.splitlines() if line.lstrip().startswith("gpu-1"))
    assert "Host base layer" in row and "1/31" in row
    assert "sglang_server : Wait for the server" in row
    # The newest long-wait progress wins: here the download line after the retry.
    assert "download: 12.3 GiB of ~480 GiB" in row
    assert "changed: [gpu-1] base : Install base packages" in text


def test_plain_lines_without_a_terminal_and_every_task_only_with_v():
    for verbose, wanted in ((0, False), (1, True)):
        console = Console(record=True, width=160, force_terminal=False)
        progress = Progress(EventCollector(), console, "gpuhost provision", "lines", verbose)
        with progress:
            feed(progress, events())
        text = console.export_text()
        assert "\x1b[" not in text
        assert "PLAY [Host base layer]" in text
        assert "changed: [gpu-1] base : Install base packages" in text
        assert "waiting: [gpu-1] sglang_server : Wait for the server: retry 2 of 60" in text
        assert "waiting: [gpu-1] download: 12.3 GiB" in text
        assert ("TASK [base : Install base packages]" in text) is wanted


def test_failed_task_is_printed_as_it_happens():
    console = Console(record=True, width=160, force_terminal=False)
    progress = Progress(EventCollector(), console, "gpuhost provision", "lines")
    data = {**PLAY, "host": "gpu-2", "task": "Check", "res": {"msg": "no GPU"}}
    feed(progress, [("runner_on_start", data), ("runner_on_failed", data)])
    assert "failed: [gpu-2] Check: no GPU" in console.export_text()


def test_counts_reset_per_play_and_pass_the_total_with_includes():
    console = Console(record=True, width=160, force_terminal=False)
    progress = Progress(EventCollector(), console, "t", "live")
    progress.use_plan(lambda: [("Host base layer", 1)])
    progress.read_plan()
    feed(progress, events()[:4])
    feed(progress, [("runner_on_start", events()[4][1]), ("runner_on_ok", events()[4][1])])
    assert progress.hosts["gpu-1"].done == 2
    console.print(progress.render())
    assert "2/1+" in console.export_text()


def test_duration():
    assert [duration(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m"]
