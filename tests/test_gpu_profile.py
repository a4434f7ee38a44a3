"""The bench's GPU samples end to end: the module's Sampler over the stand-in nvidia-smi (a
test double: tests/standin/sglang_standin.py nvidia-smi) and a missing tool, and the report's
"what bounds each level" table and plot (src/gpuhost/gpu_profile.py, report.py) over lines
whose samples come from the real H200 load capture (tests/fixtures/gpu-hosts/h200x1-day2/)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_gpu_samples as gs
from test_bench_report import CONSTRUCTED, make_run, read_lines

from gpuhost import gpu_profile, report, runfacts

ROOT = Path(__file__).resolve().parents[1]
DAY2 = ROOT / "tests" / "fixtures" / "gpu-hosts" / "h200x1-day2"
STANDIN = [sys.executable, str(ROOT / "tests" / "standin" / "sglang_standin.py"), "nvidia-smi"]


def bench_module():
    spec = importlib.util.spec_from_file_location(
        "sglang_bench", ROOT / "plugins" / "modules" / "sglang_bench.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sampler_takes_labelled_standin_samples(tmp_path):
    sampler = bench_module().Sampler(STANDIN, str(tmp_path))
    sampler.start()
    time.sleep(2.5)
    gpu = sampler.stop()
    assert gpu["standin"] is True and gpu["error"] == ""
    assert gpu["limits"]["0"]["power_limit_w"] == 600.0
    assert len(gpu["samples"]["rows"]) >= 2
    assert gpu["bound"]["bound"] == "latency"
    assert "power 330 W = 55% of the 600 W limit" in gpu["bound"]["evidence"]


def test_sampler_without_the_tool_says_so(tmp_path):
    gpu = bench_module().Sampler(["no-such-nvidia-smi"], str(tmp_path))
    gpu.start()
    record = gpu.stop()
    assert record["error"] == "no-such-nvidia-smi not found: no GPU samples"
    assert record["bound"]["bound"] == "unknown" and record["samples"]["rows"] == []


def real_phase(start: str, end: str) -> dict:
    """A level's `gpu` record as the module makes it, from the real capture's samples."""
    samples = [
        s
        for s in gs.parse_dmon((DAY2 / "load-dmon.txt").read_text())["samples"]
        if start <= s["time"] < end
    ]
    limits = {0: {"power_limit_w": 700.0, "sm_clock_max_mhz": 1980.0, "pcie_gen_max": 5,
                  "pcie_width_max": 16}}  # fmt: skip
    summary = gs.summarize(samples, limits)
    return {
        "source": "nvidia-smi dmon -s pucvmet -o T -d 1",
        "standin": False,
        "error": "",
        "limits": {"0": limits[0]},
        "summary": summary,
        "bound": gs.explain(summary),
        "samples": gs.compact(samples),
    }


def test_report_names_the_bound_of_each_level_and_draws_the_samples(tmp_path):
    lines = read_lines(CONSTRUCTED)[:3]  # levels 1, 8, 16
    phases = [("17:01:38", "17:01:48"), ("17:01:49", "17:02:00"), ("17:02:01", "17:02:12")]
    for line, (start, end) in zip(lines, phases, strict=True):
        line["gpu"] = real_phase(start, end)
    run = runfacts.load_run(make_run(tmp_path, "20260101T000000Z", lines=lines))
    text = report.render(run)
    assert "What bounds each level" in text and "STAND-IN GPU samples" not in text
    assert "| 1 | power | GPU0: busy (sm) 98%" in text
    assert "| 8 | memory bandwidth |" in text and "| 16 | pcie |" in text
    assert (run.path / gpu_profile.PLOT_NAME).read_bytes()[:4] == b"\x89PNG"
    assert f"![GPU samples under the throughput]({gpu_profile.PLOT_NAME})" in text


def test_report_labels_standin_samples(tmp_path):
    lines = read_lines(CONSTRUCTED)[:1]
    lines[0]["gpu"] = dict(real_phase("17:01:38", "17:01:48"), standin=True)
    run = runfacts.load_run(make_run(tmp_path, "20260101T000000Z", lines=lines))
    assert "**STAND-IN GPU samples**" in report.render(run)


def test_no_samples_no_section(tmp_path):
    run = runfacts.load_run(make_run(tmp_path, "20260101T000000Z"))
    text = report.render(run)
    assert "What bounds each level" not in text
    assert not (run.path / gpu_profile.PLOT_NAME).exists()


def test_levels_not_sampled_are_listed_and_not_drawn(tmp_path):
    lines = read_lines(CONSTRUCTED)[:2]
    off = bench_module().Sampler([], str(tmp_path))
    off.start()
    for line in lines:
        line["gpu"] = off.stop()
    run = runfacts.load_run(make_run(tmp_path, "20260101T000000Z", lines=lines))
    text = report.render(run)
    assert "| 1 | not sampled | GPU sampling off (gpu_sampler: []) |" in text
    assert not (run.path / gpu_profile.PLOT_NAME).exists()
    assert gpu_profile.PLOT_NAME not in text
