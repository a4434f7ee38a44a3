"""The bench's GPU samples end to end: the module's Sampler over the stand-in nvidia-smi (a
test double: tests/standin/sglang_standin.py nvidia-smi) and a missing tool, and the report's
"what bounds each level" table and plot (src/gpuhost/gpu_profile.py, report.py) over lines
whose samples come from the real H200 load capture (tests/fixtures/gpu-hosts/h200x1-day2/)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_gpu_samples as gs
from test_bench_report import CONSTRUCTED, make_run, read_lines
from test_cpu_samples import capture, standin_with_cpu_cost

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


# A TEST DOUBLE for `python -m sglang.bench_serving`: sends the level's requests to the
# server (concurrently, --max-concurrency at a time) and appends the JSON line the module
# reads, with the metrics it requires. Only the module's wiring is under test here.
BENCH_DOUBLE = """#!{python}
import json, sys, threading, urllib.request
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
port, n = a["--port"], int(a["--num-prompts"])
out_len, conc = int(a["--random-output-len"]), int(a["--max-concurrency"])
done = []
def one():
    body = json.dumps({{"model": "m", "prompt": "load", "max_tokens": out_len}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{{port}}/v1/completions", data=body,
                                 headers={{"Content-Type": "application/json"}})
    with urllib.request.urlopen(req, timeout=60) as r:
        done.append(json.loads(r.read())["usage"]["completion_tokens"])
for start in range(0, n, conc):
    ts = [threading.Thread(target=one) for _ in range(min(conc, n - start))]
    [t.start() for t in ts]; [t.join() for t in ts]
line = {{"backend": "sglang-oai", "max_concurrency": conc, "completed": len(done),
         "total_output_tokens": sum(done), "output_throughput": 1.0, "total_throughput": 1.0,
         "median_ttft_ms": 1.0, "median_itl_ms": 1.0, "mean_e2e_latency_ms": 1.0}}
open(a["--output-file"], "a").write(json.dumps(line) + "\\n")
"""


@pytest.fixture
def launch_bound_standin(tmp_path):
    yield from standin_with_cpu_cost(tmp_path)


def run_bench_module(tmp_path, port, failed=False, **params):
    fake = tmp_path / "python"
    fake.write_text(BENCH_DOUBLE.format(python=sys.executable))
    fake.chmod(0o755)
    args = {"python": str(fake), "port": port, "model": "m", "concurrency": 4,
            "num_prompts": 4, "output_len": 250, "gpu_sampler": STANDIN, **params}  # fmt: skip
    (tmp_path / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(ROOT / ".collections"))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "plugins" / "modules" / "sglang_bench.py"),
         str(tmp_path / "args.json")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    out = json.loads(proc.stdout)
    assert bool(out.get("failed")) is failed, out
    return out if failed else out["result"]


def test_module_names_a_launch_bound_standin_cpu_launch(tmp_path, launch_bound_standin):
    # The stand-in's made GPU samples say latency (busy 100%, 55% power); its scheduler
    # thread, dialled to 2 ms of CPU per token, has no headroom: the verdict is cpu_launch.
    port, proc = launch_bound_standin
    result = run_bench_module(tmp_path, port)
    cpu = result["cpu"]
    assert cpu["error"] == "" and f"server pid {proc.pid}" in cpu["source"]
    assert cpu["summary"]["busiest"]["comm"] == "standin-sched"
    assert 0.0019 <= cpu["summary"]["cpu_s_per_token"] <= 0.003, cpu
    bound = result["gpu"]["bound"]
    assert bound["bound"] == "cpu_launch", bound
    assert "busy (sm) 100%" in bound["evidence"]
    assert "; CPU: busiest server thread 'standin-sched'" in bound["evidence"]


def test_module_with_the_cpu_sampler_off_keeps_the_gpu_verdict(tmp_path, launch_bound_standin):
    port, _ = launch_bound_standin
    result = run_bench_module(tmp_path, port, cpu_sampler=False)
    assert result["cpu"] == {"source": "", "error": "CPU sampling off (cpu_sampler: false)",
                             "summary": None}  # fmt: skip
    assert result["gpu"]["bound"]["bound"] == "latency"


def test_report_shows_the_cpu_side_beside_the_gpu_samples(tmp_path):
    # Level 1 from the real H100 launch-bound capture, level 8 from its compute-bound one
    # (tests/fixtures/gpu-hosts/gpu1-launch-bound/), level 16 with the CPU sampler off.
    lines = read_lines(CONSTRUCTED)[:3]
    for line, phase in zip(lines, ("launch", "compute"), strict=False):
        _, cpu, summary = capture(phase)
        line["gpu"] = dict(real_phase("17:01:38", "17:01:48"), summary=summary,
                           bound=gs.explain(summary, cpu))  # fmt: skip
        line["cpu"] = {"source": "/proc, server pid 559", "error": "", "summary": cpu}
    lines[2]["cpu"] = {"source": "", "error": "CPU sampling off (cpu_sampler: false)",
                       "summary": None}  # fmt: skip
    run = runfacts.load_run(make_run(tmp_path, "20260101T000000Z", lines=lines))
    text = report.render(run)
    assert "| 1 | cpu launch | GPU0: busy (sm) 30%, power 123 W = 18% of the 700 W" in text
    assert "| 8 | power |" in text
    assert "The CPU side of each level, from /proc" in text
    assert "| " + " | ".join(gpu_profile.CPU_HEADER) + " |" in text
    assert (
        "| 1 | python (tid 559) 100% of a core | 1.00 cores | 0.00892 | 0.0% | 1.0 / 16 |" in text
    )
    assert "| 16 | not sampled: CPU sampling off (cpu_sampler: false) |" in text
    assert (run.path / gpu_profile.PLOT_NAME).read_bytes()[:4] == b"\x89PNG"


def test_module_refuses_a_unit_name_that_is_no_service_name(tmp_path):
    out = run_bench_module(tmp_path, 1, failed=True, server_unit="sglang.service; rm -rf /")
    assert out["msg"] == (
        "server_unit 'sglang.service; rm -rf /' is no systemd service name "
        "(letters, digits, @_.:- ending in .service)"
    )
