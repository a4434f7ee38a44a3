"""Stage times of a run and its timeline picture: which steps overlapped, where the time went.

From the job events (each task result carries its start and end) and two facts the roles set:
gpuhost_model_cache.download (when the background download unit really started and ended,
read from systemd) and gpuhost_driver_activation (load / reboot / reboot needed, how long).
`attach` puts `stages` into report.json and draws runs/<ts>/timeline.png; `markdown` is the
report.md section. Stages a run did not reach (or that did nothing) are simply absent: a
stage is one where a task did work; skipped tasks, bookkeeping (set_fact, assert, debug, the
argument-spec check) and sglang_server's settings resolution (which runs under any tag in the
Serve and Verify plays) do not make one. A run whose stages add up to under a second has
nothing to draw: no picture, no line (matplotlib alone costs seconds).
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path

from gpuhost import runfacts

PLOT_NAME = "timeline.png"
# Stages in display order: (name, how a task result is matched). Reboot and download come
# from facts; the rest from task events.
STAGES = (
    "preflight",
    "base",
    "download start",
    "download",
    "driver",
    "reboot",
    "CUDA",
    "Python env",
    "download wait",
    "server start",
    "verify",
)
_ACTIVATION_TASKS = (
    "Load the new module (nothing holds the GPUs)",
    "Reboot to load the new NVIDIA driver",
    "Read the GPU facts again with the driver loaded",
)
_WAIT_TASK = "Wait for the download, showing bytes, rate and ETA"
# Actions that decide or record and do no work on the host: a stage made only of these did
# not run (`check -t preflight` runs the Serve play's always-tagged settings tasks).
_BOOKKEEPING = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("set_fact", "assert", "debug", "validate_argument_spec", "meta", "fail")
)
# sglang_server task files that resolve its settings (every play that needs them includes
# them, under any tag): no server starts there.
_SETTINGS_FILES = ("/sglang_server/tasks/validate.yml", "/sglang_server/tasks/facts.yml")
# Under this much time in all, a run has no timeline worth a picture.
MIN_DRAWN_S = 1.0
# The chain that the download overlaps: everything installed between preflight and serve.
INSTALL_CHAIN = ("base", "download start", "driver", "reboot", "CUDA", "Python env")


def _stage_of(data: dict) -> str | None:
    play = data.get("play") or ""
    role = data.get("role") or ""
    task = data.get("task") or ""
    if str(data.get("task_path") or "").split(":")[0].endswith(_SETTINGS_FILES):
        return None
    if play == "Preflight":
        return "preflight"
    if role == "model_cache":
        if play == "Host base layer":
            return "download start"  # model_cache_overlap: started before the driver
        return "download wait" if task == _WAIT_TASK else None
    if role == "base":
        # cuda_repo runs base's dpkg check before the driver packages: that is driver time.
        return "base" if play == "Host base layer" else "driver"
    if role in ("nvidia_driver", "cuda_repo"):
        return "reboot" if task in _ACTIVATION_TASKS else "driver"
    if role == "preflight" and play == "NVIDIA driver and CUDA":
        return "reboot"  # the facts read again after the load or reboot
    if role == "cuda_toolkit":
        return "CUDA"
    if role in ("python_env", "nccl"):
        return "Python env"
    if role == "sglang_server" or play == "Serve":
        return "server start"
    if role == "verify" or play.startswith("Verify"):
        return "verify"
    return None


def _ts(text: object) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def _events(run_dir: Path):
    for event in runfacts.run_events(run_dir):
        if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped"):
            yield event


def stages(run_dir: Path, started_at: str, facts: dict[str, dict]) -> list[dict]:
    """[{name, start_s, end_s, duration_s, busy_s}] relative to the run's start, in order."""
    origin = _ts(started_at)
    spans: dict[str, list[float]] = {}
    busy: dict[str, float] = {}
    ran: set[str] = set()  # stages where a task did work
    for event in _events(run_dir):
        data = event.get("event_data") or {}
        name = _stage_of(data)
        start, end = _ts(data.get("start")), _ts(data.get("end"))
        if not name or start is None or end is None:
            continue
        skipped = event.get("event") == "runner_on_skipped"
        if skipped and name not in ("preflight", "verify"):
            continue
        if not skipped and str(data.get("task_action") or "") not in _BOOKKEEPING:
            ran.add(name)
        span = spans.setdefault(name, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
        busy[name] = busy.get(name, 0.0) + (end - start)
        origin = start if origin is None else min(origin, start)
    for host_facts in facts.values():
        download = (host_facts.get("gpuhost_model_cache") or {}).get("download") or {}
        start, end = _ts(download.get("started_at")), _ts(download.get("finished_at"))
        if start is not None and end is not None and end >= start:
            # A download an earlier run started shows where it really began.
            spans["download"] = [start, end]
            busy["download"] = end - start
            ran.add("download")
    if origin is None:
        return []
    out = []
    for name in STAGES:
        if name not in spans or name not in ran:
            continue
        start, end = spans[name]
        out.append(
            {
                "name": name,
                "start_s": round(start - origin, 1),
                "end_s": round(end - origin, 1),
                "duration_s": round(end - start, 1),
                "busy_s": round(busy.get(name, 0.0), 1),
            }
        )
    return out


def summary(stage_list: list[dict]) -> dict:
    """What the overlap can reach at best.

    install_chain_s: from the run's start to the end of the last install stage (preflight,
    base, driver, reboot, CUDA, Python env); download_s: the download alone;
    server_and_verify_s: server start (less its wait for the download) and verify;
    longest_chain_s:
    max(download, install chain) + server start + verify - the issue's reference, which a run
    with the download in the background should come within 10% of.
    """
    by = {s["name"]: s for s in stage_list}
    chain = [by[n] for n in ("preflight", *INSTALL_CHAIN) if n in by]
    install = max(s["end_s"] for s in chain) if chain else 0.0
    download = by["download"]["duration_s"] if "download" in by else 0.0
    # The serve stage less the time it sat waiting for the download, plus verify.
    tail = sum(by[n]["duration_s"] for n in ("server start", "verify") if n in by)
    tail -= by["download wait"]["duration_s"] if "download wait" in by else 0.0
    return {
        "install_chain_s": round(install, 1),
        "download_s": round(download, 1),
        "download_end_s": by["download"]["end_s"] if "download" in by else 0.0,
        "server_and_verify_s": round(tail, 1),
        "longest_chain_s": round(max(install, download) + tail, 1),
    }


def plot(stage_list: list[dict], path: Path, title: str) -> Path:
    """A Gantt-like PNG: one bar per stage on a common clock, background steps hatched."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a server or in CI
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(10, 0.45 * len(stage_list) + 1.4), dpi=100)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, stage in enumerate(stage_list):
        background = stage["name"] == "download"
        axis.barh(
            row,
            max(stage["duration_s"], 0.5),
            left=stage["start_s"],
            color=colours[row % len(colours)],
            hatch="//" if background else None,
            alpha=0.6 if background else 0.9,
        )
        axis.text(
            stage["end_s"],
            row,
            f" {stage['duration_s']:.0f} s",
            va="center",
            fontsize=8,
        )
    axis.set_yticks(range(len(stage_list)), [s["name"] for s in stage_list])
    axis.set_xlim(left=0)
    axis.invert_yaxis()
    axis.set_xlabel("seconds since the run started")
    axis.set_title(title, fontsize=10)
    axis.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def worth_drawing(stage_list: list[dict]) -> bool:
    """A timeline says something when its stages took a second or more in all."""
    return sum(s["duration_s"] for s in stage_list) >= MIN_DRAWN_S


def seconds(value: float) -> str:
    """A stage's time on the terminal: under a second is `<1s`, never a `0s` that reads
    as "did not run"."""
    return "<1s" if value < 1 else f"{value:.0f}s"


def attach(report: dict, run_dir: Path) -> None:
    """stages and their summary into the report; timeline.png beside it. Never fails a run."""
    try:
        facts = runfacts.facts_from_events(run_dir)
        stage_list = stages(run_dir, report.get("started_at") or "", facts)
    except Exception as exc:  # a picture must not turn a good run into a failed one
        report["stages_error"] = f"{type(exc).__name__}: {exc}"
        return
    if not worth_drawing(stage_list):
        return
    report["stages"] = stage_list
    report["stages_summary"] = summary(stage_list)
    activation = {
        h: f["gpuhost_driver_activation"]
        for h, f in facts.items()
        if f.get("gpuhost_driver_activation")
    }
    if activation:
        report["driver_activation"] = activation
    try:
        plot(stage_list, run_dir / PLOT_NAME, f"gpuhost {report.get('command', '')}: stages")
    except Exception as exc:
        report["stages_error"] = f"timeline plot: {type(exc).__name__}: {exc}"


def markdown(report: dict, run_dir: Path) -> list[str]:
    """The report.md section: the picture and the table of stage times."""
    stage_list = report.get("stages") or []
    if not stage_list:
        return []
    lines = ["", "## Timeline", ""]
    if not (run_dir / PLOT_NAME).is_file():
        # Without the picture the table below still says it all.
        with contextlib.suppress(Exception):
            plot(stage_list, run_dir / PLOT_NAME, f"gpuhost {report.get('command', '')}: stages")
    if (run_dir / PLOT_NAME).is_file():
        lines += [f"![stages on a common clock]({PLOT_NAME})", ""]
    lines += ["| stage | start (s) | end (s) | duration (s) |", "|---|---|---|---|"]
    lines += [
        f"| {s['name']} | {s['start_s']} | {s['end_s']} | {s['duration_s']} |" for s in stage_list
    ]
    info = report.get("stages_summary") or {}
    if info:
        lines += [
            "",
            f"Install chain {info['install_chain_s']} s, download {info['download_s']} s, "
            f"server start + verify {info['server_and_verify_s']} s: longest chain "
            f"{info['longest_chain_s']} s; the run took {report.get('duration_s')} s.",
        ]
    for host, act in sorted((report.get("driver_activation") or {}).items()):
        lines += [
            "",
            f"Driver on {host}: {act.get('outcome')} ({act.get('reason')}), "
            f"{act.get('duration_s')} s.",
        ]
    return lines


def print_summary(console, report: dict) -> None:
    """Two lines under the summary table: the stage times, and what the driver did."""
    from rich.text import Text

    stage_list = report.get("stages") or []
    if stage_list:
        text = ", ".join(f"{s['name']} {seconds(s['duration_s'])}" for s in stage_list)
        console.print(Text(f"Stages: {text}", style="dim"), soft_wrap=True)
    for host, act in sorted((report.get("driver_activation") or {}).items()):
        console.print(
            Text(
                f"Driver on {host}: {act.get('outcome')} in {act.get('duration_s')} s - "
                f"{act.get('reason')}"
            ),
            soft_wrap=True,
        )
