"""Stage times and the timeline picture of a run (src/gpuhost/timeline.py), from job events
written the way ansible-runner writes them, and the facts the roles set."""

from __future__ import annotations

import json
from pathlib import Path

from gpuhost import timeline

T0 = "2026-12-01T17:00:00+00:00"


def _at(seconds: float) -> str:
    minutes, sec = divmod(seconds, 60)
    return f"2026-12-01T17:{int(minutes):02d}:{sec:06.3f}+00:00"


def _write_run(tmp_path: Path, tasks: list[tuple], facts: dict | None = None) -> Path:
    events = tmp_path / "runner" / "artifacts" / "job" / "job_events"
    events.mkdir(parents=True)
    counter = 0
    for play, role, task, start, end, *kind in tasks:
        counter += 1
        data = {
            "host": "h1",
            "play": play,
            "role": role,
            "task": task,
            "start": _at(start),
            "end": _at(end),
            "res": {},
        }
        event = kind[0] if kind else "runner_on_ok"
        (events / f"{counter}-x.json").write_text(json.dumps({"event": event, "event_data": data}))
    if facts:
        counter += 1
        data = {
            "host": "h1",
            "play": "Serve",
            "role": "model_cache",
            "task": "Record",
            "start": _at(0),
            "end": _at(0),
            "res": {"ansible_facts": facts},
        }
        # A fact-setting task whose own times do not matter here.
        (events / f"{counter}-x.json").write_text(
            json.dumps({"event": "runner_on_ok", "event_data": data})
        )
    return tmp_path


OVERLAPPED = [
    ("Preflight", "preflight", "Read GPU facts", 1, 10),
    ("Host base layer", "base", "Install base packages", 11, 20),
    ("Host base layer", "model_cache", "Start the download in the background", 20, 21),
    ("NVIDIA driver and CUDA", "base", "Read dpkg's state", 22, 23),
    ("NVIDIA driver and CUDA", "nvidia_driver", "Install the NVIDIA driver packages", 23, 60),
    ("NVIDIA driver and CUDA", "nvidia_driver", "Reboot to load the new NVIDIA driver", 60, 100),
    ("NVIDIA driver and CUDA", "cuda_toolkit", "Install CUDA", 100, 130),
    ("Runtime", "python_env", "Sync the venv", 131, 200),
    ("Runtime", "nccl", "Skipped thing", 200, 201, "runner_on_skipped"),
    ("Serve", "", "Resolve and validate the serving profile", 201, 202),
    ("Serve", "model_cache", "Wait for the download, showing bytes, rate and ETA", 203, 240),
    ("Serve", "sglang_server", "Restart the server", 241, 260),
    ("Verify the SGLang server", "verify", "Ask the server", 261, 270),
]
DOWNLOAD = {
    "gpuhost_model_cache": {
        "download": {
            "started_at": "2026-12-01T17:00:21+00:00",
            "finished_at": "2026-12-01T17:04:00+00:00",
        }
    }
}


def test_stages_on_a_common_clock(tmp_path):
    run = _write_run(tmp_path, OVERLAPPED, DOWNLOAD)
    stages = {
        s["name"]: s for s in timeline.stages(run, T0, timeline.runfacts.facts_from_events(run))
    }
    assert list(stages) == [
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
    ]
    assert (stages["driver"]["start_s"], stages["driver"]["end_s"]) == (22.0, 60.0)
    # base's dpkg check that cuda_repo runs before the driver packages is driver time.
    assert (stages["base"]["start_s"], stages["base"]["end_s"]) == (11.0, 20.0)
    assert stages["reboot"]["duration_s"] == 40.0
    assert (stages["download"]["start_s"], stages["download"]["end_s"]) == (21.0, 240.0)
    # A skipped task is no work: nccl's skipped task does not stretch Python env.
    assert stages["Python env"]["end_s"] == 200.0
    summary = timeline.summary(list(stages.values()))
    assert summary == {
        "install_chain_s": 200.0,
        "download_s": 219.0,
        "download_end_s": 240.0,
        # serve 201..260 less the 37 s wait, plus verify 9 s
        "server_and_verify_s": 31.0,
        "longest_chain_s": 250.0,
    }


def test_attach_writes_stages_picture_and_report_section(tmp_path):
    run = _write_run(
        tmp_path,
        OVERLAPPED,
        {
            **DOWNLOAD,
            "gpuhost_driver_activation": {
                "outcome": "rebooted",
                "reason": "a reboot loads it: the nouveau module is loaded",
                "duration_s": 40.0,
            },
        },
    )
    report = {"command": "provision", "started_at": T0, "duration_s": 270}
    timeline.attach(report, run)
    assert report["stages"][0]["name"] == "preflight"
    assert report["driver_activation"]["h1"]["outcome"] == "rebooted"
    png = run / timeline.PLOT_NAME
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = "\n".join(timeline.markdown(report, run))
    assert "![stages on a common clock](timeline.png)" in text
    assert "| reboot | 60.0 | 100.0 | 40.0 |" in text
    assert "longest chain 250.0 s" in text
    assert (
        "Driver on h1: rebooted (a reboot loads it: the nouveau module is loaded), 40.0 s." in text
    )


def test_a_run_without_events_has_no_stages(tmp_path):
    report = {"command": "provision", "started_at": T0}
    timeline.attach(report, tmp_path)
    assert "stages" not in report and timeline.markdown(report, tmp_path) == []


def test_the_cli_shows_the_download_progress_line():
    import io

    from rich.console import Console

    from gpuhost.events import EventCollector
    from gpuhost.progress import Progress

    out = io.StringIO()
    collector = EventCollector()
    line = (
        "[h1] acme/m@main: 1.0 GiB of ~4.0 GiB (25 %), 16.0 MiB/s, ETA 3m12s, "
        "2 file(s) in progress (1m04s)"
    )
    with Progress(collector, Console(file=out, width=200), "gpuhost provision", "lines"):
        start = {"host": "h1", "task": "Wait for the download", "play_uuid": "p"}
        collector.handle({"event": "runner_on_start", "event_data": start})
        collector.handle({"event": "verbose", "stdout": line, "event_data": {}})
        collector.handle({"event": "verbose", "stdout": "ok: [h1] => something", "event_data": {}})
    assert line in out.getvalue()
    assert "something" not in out.getvalue()
