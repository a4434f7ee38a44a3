"""The CPU side of a bench level (plugins/module_utils/gpuhost_cpu_samples.py) and the verdict
it refines (gpuhost_gpu_samples.explain): made /proc text, the real H100 capture of a
launch-bound and a compute-bound loop (tests/fixtures/gpu-hosts/gpu1-launch-bound/,
SOURCE.md), and the sampler against the SGLang stand-in (a test double) with a dialled CPU
cost per token, on a loopback port."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_cpu_samples as cs
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_gpu_samples as gs
from gpuhost_fakes import free_port, serve_standin

CAPTURE = Path(__file__).parent / "fixtures" / "gpu-hosts" / "gpu1-launch-bound"
STANDIN = Path(__file__).parent / "standin" / "sglang_standin.py"
# This test's loopback ports (the test port plan: 39600-39699).
PORTS = range(39600, 39700)
H100_LIMITS = gs.parse_limits((CAPTURE / "limits.txt").read_text())
# The loop of each phase: the dmon seconds with a kernel running, less the ramp (SOURCE.md).
WINDOWS = {"launch": ("11:42:07", "11:42:26"), "compute": ("11:42:38", "11:42:57")}


def stat_line(pid, comm, ticks, ppid=1, starttime=100, tid=None):
    """A /proc/<pid>/stat line (proc(5)): utime is field 14, stime 15, starttime 22."""
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks - ticks // 4), str(ticks // 4)]
    fields += ["0"] * 6 + [str(starttime)] + ["0"] * 30
    return f"{tid or pid} ({comm}) " + " ".join(fields) + "\n"


def proc_stat(user, steal, idle, running=1, cpus=4):
    lines = [f"cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0"]
    lines += [f"cpu{n} 0 0 0 0 0 0 0 0 0 0" for n in range(cpus)]
    return "\n".join(lines) + f"\nprocs_running {running}\nprocs_blocked 0\n"


def snap(time_s, threads, user, steal, idle, running=1):
    """A sampler snapshot of process 10 with threads {tid: (comm, ticks)}."""
    total = sum(t for _, t in threads.values())
    return {
        "time": time_s,
        "proc_stat": proc_stat(user, steal, idle, running),
        "loadavg": f"1.0 1.0 1.0 {running}/300 999\n",
        "procs": {
            "10": {
                "stat": stat_line(10, "python3", total),
                "tasks": {
                    str(tid): {"stat": stat_line(10, c, t, tid=tid), "comm": c + "\n"}
                    for tid, (c, t) in threads.items()
                },
            }
        },
    }


def test_parse_pid_stat_takes_comm_to_the_last_parenthesis():
    stat = cs.parse_pid_stat(stat_line(42, "a (b) c", 400, ppid=7, starttime=55))
    assert stat == {"pid": 42, "comm": "a (b) c", "state": "S", "ppid": 7, "ticks": 400,
                    "starttime": 55}  # fmt: skip
    assert cs.parse_pid_stat("") is None and cs.parse_pid_stat("12 (x) S") is None


def test_parse_proc_stat_loadavg_and_the_listener():
    parsed = cs.parse_proc_stat(proc_stat(100, 7, 900, running=5, cpus=16))
    assert parsed["cpu"]["steal"] == 7 and parsed["cpu"]["total"] == 1007
    assert parsed["cpus"] == 16 and parsed["procs_running"] == 5
    assert cs.parse_loadavg("0.28 0.07 0.02 2/264 582\n") == 2
    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n"
        "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 "
        "0 31337 1 0000000000000000 100 0 0 10 0\n"
        "   1: 0100007F:7530 0100007F:A000 01 00000000:00000000 00:00000000 00000000  1000 "
        "0 4242 1 0000000000000000 100 0 0 10 0\n"
    )
    assert cs.listen_inodes(tcp, 30000) == [31337]  # the established one is no listener
    assert cs.listen_inodes(tcp, 30001) == []
    stats = {1: {"ppid": 0}, 10: {"ppid": 1}, 11: {"ppid": 10}, 12: {"ppid": 11}, 20: {"ppid": 1}}
    assert cs.descendants(stats, 10) == {10, 11, 12}


def test_summarize_names_the_busiest_thread_steal_and_run_queue():
    start = snap(0.0, {10: ("python3", 0), 11: ("scheduler", 0)}, 0, 0, 0)
    end = snap(10.0, {10: ("python3", 100), 11: ("scheduler", 950)}, 3000, 1000, 6000)
    samples = [{"proc_stat": proc_stat(1500, 750, 750, running=9)},
               {"proc_stat": proc_stat(2000, 800, 1200, running=7)}]  # fmt: skip
    cpu = cs.summarize(start, end, samples, clk_tck=100, output_tokens=5000)
    assert cpu["busiest"] == {"comm": "scheduler", "pid": 10, "tid": 11, "share": 0.95}
    assert cpu["saturated"] == 1 and cpu["threads"] == 2
    assert cpu["cpu_s"] == 10.5 and cpu["cores"] == 1.05
    assert cpu["cpu_s_per_token"] == pytest.approx(0.0021)
    assert cpu["steal_pct"] == pytest.approx(10.0)
    assert cpu["steal_max_pct"] == pytest.approx(25.0)  # the first half second
    assert cpu["run_queue"] == 7.0 and cpu["cpus"] == 4  # the sampler itself taken off
    assert cs.cpu_bound(cpu) == ["thread", "steal", "run_queue"]
    words = cs.evidence(cpu)
    for part in (
        "busiest server thread 'scheduler' (pid 10, tid 11) at 95% of a core",
        "2.1 CPU ms per output token",
        "steal 10.0%",
        "run queue 7.0 for 4 CPUs",
    ):
        assert part in words, words  # fmt: skip
    assert cs.summarize(start, start, [], 100) is None


def gpu(sm, pwr, n=1):
    return [{"time": None, "gpu": g, "pwr": pwr, "gtemp": 50.0, "sm": sm, "mem": 30.0,
             "pclk": 1980.0, "mclk": 2619.0, "pviol": 0.0, "tviol": 0.0, "rxpci": 500.0,
             "txpci": 500.0} for g in range(n)]  # fmt: skip


CALM = {
    "wall_s": 10,
    "cpu_s": 5.0,
    "cores": 0.5,
    "cpu_s_per_token": 0.0005,
    "busiest": {"comm": "scheduler", "pid": 10, "tid": 11, "share": 0.4},
    "saturated": 0,
    "threads": 40,
    "steal_pct": 0.5,
    "steal_max_pct": 1.0,
    "run_queue": 1.0,
    "cpus": 16,
}
SPINNING = dict(CALM, busiest=dict(CALM["busiest"], share=0.99), saturated=1)
BUSY = dict(CALM["busiest"], share=0.6)
STOLEN = dict(CALM, busiest=BUSY, steal_pct=22.0)
CROWDED = dict(CALM, busiest=BUSY, run_queue=20.0)


def test_a_thread_that_spins_at_idle_is_no_evidence_of_load():
    """SGLang's scheduler polls its sockets at ~100% of a core with no request at all unless
    the server runs with --sleep-on-idle (sgl-project/sglang#3708, #9863): its share under
    load tells nothing, and the quiet second before the load shows it."""
    idle = (snap(0.0, {10: ("python3", 0), 11: ("scheduler", 0)}, 0, 0, 0),
            snap(1.0, {10: ("python3", 1), 11: ("scheduler", 98)}, 0, 0, 0))  # fmt: skip
    start = snap(1.0, {10: ("python3", 1), 11: ("scheduler", 98)}, 0, 0, 0)
    end = snap(11.0, {10: ("python3", 101), 11: ("scheduler", 1098)}, 3000, 0, 6000)
    spinning = cs.summarize(start, end, [], clk_tck=100, output_tokens=5000, idle=idle)
    assert spinning["busiest"]["comm"] == "scheduler" and spinning["busiest"]["share"] == 1.0
    assert spinning["saturated"] == 0
    assert spinning["idle_spinners"] == [{"comm": "scheduler", "tid": 11, "share": 0.98}]
    assert cs.cpu_bound(spinning) == []
    assert "'scheduler' (tid 11) spun at 98% of a core before the load" in cs.evidence(spinning)
    # the same level after a quiet second: the load saturated the thread
    quiet = (idle[0], snap(1.0, {10: ("python3", 0), 11: ("scheduler", 2)}, 0, 0, 0))
    loaded = cs.summarize(start, end, [], clk_tck=100, output_tokens=5000, idle=quiet)
    assert loaded["saturated"] == 1 and loaded["idle_spinners"] == []
    assert cs.cpu_bound(loaded) == ["thread"]
    assert "spun" not in cs.evidence(loaded)


def test_steal_and_run_queue_count_only_while_a_server_thread_works():
    assert cs.cpu_bound(CALM) == [] and cs.cpu_bound(None) == []
    assert cs.cpu_bound(SPINNING) == ["thread"]
    assert cs.cpu_bound(STOLEN) == ["steal"] and cs.cpu_bound(CROWDED) == ["run_queue"]
    # the same steal and queue beside a server whose threads sleep: not the server's bound
    assert cs.cpu_bound(dict(STOLEN, busiest=CALM["busiest"])) == []
    assert cs.cpu_bound(dict(CROWDED, busiest=CALM["busiest"])) == []


@pytest.mark.parametrize(
    ("samples", "cpu", "bound"),
    [
        (gpu(100.0, 330.0), None, "latency"),  # no CPU samples: as before
        (gpu(100.0, 330.0), CALM, "latency"),  # one GPU, CPU with headroom: undecided
        (gpu(100.0, 330.0), SPINNING, "cpu_launch"),
        (gpu(100.0, 330.0, n=8), SPINNING, "cpu_launch"),
        (gpu(100.0, 330.0, n=8), CALM, "interconnect"),
        (gpu(30.0, 120.0), STOLEN, "cpu_launch"),  # idle GPU, stolen CPU
        (gpu(100.0, 330.0, n=8), CROWDED, "cpu_launch"),  # more runnable threads than CPUs
        (gpu(30.0, 120.0), CALM, "idle"),
        (gpu(30.0, 120.0), dict(STOLEN, busiest=CALM["busiest"]), "idle"),
        (gpu(30.0, 120.0, n=8), CALM, "idle"),  # too little work is no interconnect
        (gpu(100.0, 690.0), SPINNING, "power"),  # a spinning thread beside a full GPU
    ],
)
def test_the_verdict_splits_latency_by_the_cpu_side(samples, cpu, bound):
    limits = {g: {"power_limit_w": 700.0, "sm_clock_max_mhz": 1980.0, "pcie_gen_max": 5,
                  "pcie_width_max": 16} for g in range(8)}  # fmt: skip
    verdict = gs.explain(gs.summarize(samples, limits), cpu)
    assert verdict["bound"] == bound, verdict
    assert verdict["advice"] == gs.ADVICE[bound]
    assert ("; CPU: busiest server thread 'scheduler'" in verdict["evidence"]) is bool(cpu)
    if bound == "interconnect":
        assert "8 GPUs in step, no CPU thread saturated" in verdict["evidence"]
        assert "P2P" in verdict["advice"] and "NCCL" in verdict["advice"]
    if bound == "cpu_launch":
        assert "NUMA node" in verdict["advice"] and "--cuda-graph-max-bs" in verdict["advice"]


def capture(phase):
    record = json.loads((CAPTURE / f"{phase}-proc.json").read_text())
    cpu = cs.summarize(record["start"], record["end"], record["samples"], record["clk_tck"],
                       output_tokens=record["done"]["kernels"])  # fmt: skip
    start, end = WINDOWS[phase]
    samples = gs.parse_dmon((CAPTURE / f"{phase}-dmon.txt").read_text())["samples"]
    summary = gs.summarize([s for s in samples if start <= s["time"] < end], H100_LIMITS)
    return record, cpu, summary


def test_real_launch_bound_loop_is_cpu_launch():
    # 2.24 M tiny kernels from one Python thread in 20 s: the GPU busy a third of the time at
    # 18% of its power limit, the launching thread at 100% of a core.
    record, cpu, summary = capture("launch")
    assert cpu["busiest"]["comm"] == "python" and cpu["busiest"]["tid"] == record["pid"]
    assert cpu["busiest"]["share"] == pytest.approx(1.0, abs=0.02)
    assert cpu["cpus"] == 16 and cpu["steal_pct"] == pytest.approx(0.0, abs=0.5)
    assert cpu["cpu_s_per_token"] == pytest.approx(20.0 / 2_240_000, rel=0.05)  # ~9 us a kernel
    assert gs.explain(summary)["bound"] == "idle"  # the GPU side alone: waiting for work
    verdict = gs.explain(summary, cpu)
    assert verdict["bound"] == "cpu_launch", verdict
    for words in ("power 123 W = 18% of the 700 W limit",
                  "busiest server thread 'python'", "at 100% of a core"):  # fmt: skip
        assert words in verdict["evidence"], verdict["evidence"]


def test_real_compute_bound_loop_is_power_bound_though_its_thread_spins():
    # bf16 matmuls: 697 of 700 W, power-capped all the time; the launching thread also shows
    # 100% (it spins in cudaStreamSynchronize), which must not make it cpu_launch.
    _, cpu, summary = capture("compute")
    assert cpu["busiest"]["share"] == pytest.approx(1.0, abs=0.02)
    verdict = gs.explain(summary, cpu)
    assert verdict["bound"] == "power", verdict
    assert "power-capped 100% of the time" in verdict["evidence"]


def standin_with_cpu_cost(tmp_path):
    """The stand-in with 2000 us of CPU per token and no sleep per token, on loopback:
    yields (port, process), stops it after (tests/test_gpu_profile.py uses it too)."""
    yield from serve_standin(
        tmp_path / "standin.log", PORTS, "--standin-token-delay", "0",
        "--standin-cpu-us-per-token", "2000", timeout=20,
    )  # fmt: skip


@pytest.fixture
def launch_bound_standin(tmp_path):
    yield from standin_with_cpu_cost(tmp_path)


def test_sampler_finds_the_standins_busy_thread_and_its_cost(launch_bound_standin):
    port, proc = launch_bound_standin
    sampler = cs.CpuSampler(port, interval=0.2)
    tokens = []

    def client():
        body = json.dumps({"model": "m", "prompt": "load", "max_tokens": 250}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", data=body,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            tokens.append(json.loads(answer.read())["usage"]["completion_tokens"])

    sampler.start()
    clients = [threading.Thread(target=client) for _ in range(4)]  # 1000 tokens: ~2 s of CPU
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(timeout=60)
    sampler.stop()
    record = sampler.record(sum(tokens))
    assert sum(tokens) == 1000
    assert record["error"] == "" and f"server pid {proc.pid} (listener of port" in record["source"]
    cpu = record["summary"]
    assert cpu["busiest"]["comm"] == "standin-sched" and cpu["busiest"]["pid"] == proc.pid
    # Its share of a core depends on how busy this machine is; its share of the server's CPU
    # time does not: the dialled cost is nearly all of it.
    assert cpu["busiest"]["share"] >= 0.5, cpu
    assert cpu["busiest"]["share"] * cpu["wall_s"] >= 0.85 * cpu["cpu_s"], cpu
    # 2 ms dialled a token (spun in CPU time); the HTTP handling adds a little.
    assert 0.0019 <= cpu["cpu_s_per_token"] <= 0.003, cpu
    assert len(sampler.samples) >= 3


def test_sampler_without_a_server_says_so():
    port = free_port(PORTS)  # nothing listens there
    sampler = cs.CpuSampler(port, unit="no-such-gpuhost-unit.service")
    sampler.start()
    sampler.stop()
    record = sampler.record(10)
    assert record["summary"] is None and f"no listener of port {port}" in record["error"]
    assert cs.CpuSampler(port, unit="x; rm -rf /.service").unit == ""  # never reaches argv
