# Copyright: gpuhost contributors
# Apache-2.0
"""The CPU side of a bench level: the server's process tree and the guest's CPUs.

The bench module (sglang_bench) reads, beside each bench_serving level, raw /proc text:
the server's processes and threads (/proc/<pid>/stat, /proc/<pid>/task/<tid>/stat and comm)
at the level's start and end, and /proc/stat with /proc/loadavg every half second. This file
parses that text and sums a level up: the server's CPU seconds per output token, its busiest
thread's share of one core (and the thread's name), steal time and the run queue against the
CPU count. Pure: text in, dicts out (tests/test_cpu_samples.py, over made /proc text and a
real H100 capture in tests/fixtures/gpu-hosts/gpu1-launch-bound/). CpuSampler, at the end,
is the thin part that reads /proc; it only ever builds paths from integers (pids, tids) and
reads, never writes or follows a path the server's account could choose.

proc(5): /proc/<pid>/stat fields after the ")" closing comm: state ppid ... utime (14th
field) stime (15th) ... starttime (22nd), in clock ticks (sysconf SC_CLK_TCK); /proc/stat
`cpu` user nice system idle iowait irq softirq steal ..., `procs_running` (runnable threads,
the reader included); /proc/net/tcp: local address:port in hex, st 0A = LISTEN, inode.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from itertools import pairwise

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_cpu_stat import (
    parse_proc_stat as cpu_lines,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_cpu_stat import steal_between

THREAD_SATURATED = 0.90  # a thread at this share of one core or more leaves no headroom
THREAD_BUSY = 0.50  # steal and a long run queue matter once a server thread works this much
STEAL_BOUND = 10.0  # % of CPU time the hypervisor gave to someone else
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
UNIT = re.compile(r"^[A-Za-z0-9@_.:-]{1,200}\.service$")


def parse_pid_stat(text):
    """/proc/<pid>/stat (or a task's) -> {pid, comm, state, ppid, ticks, starttime}; None if
    unreadable. comm may hold spaces and parentheses: it ends at the last ')'."""
    text = (text or "").strip()
    head, sep, rest = text.rpartition(")")
    if not sep or "(" not in head:
        return None
    pid, _, comm = head.partition(" (")
    fields = rest.split()
    try:
        return {
            "pid": int(pid),
            "comm": comm,
            "state": fields[0],
            "ppid": int(fields[1]),
            "ticks": int(fields[11]) + int(fields[12]),
            "starttime": int(fields[19]),
        }
    except (IndexError, ValueError):
        return None


def parse_proc_stat(text):
    """/proc/stat -> {cpu: {user, ..., steal, total}, cpus, procs_running}; the cpu lines are
    read by the one /proc/stat parser (gpuhost_cpu_stat, which preflight's steal check uses)."""
    lines = cpu_lines(text)
    out = {"cpu": None, "cpus": sum(1 for name in lines if name != "cpu"), "procs_running": None}
    if "cpu" in lines:
        values = (lines["cpu"] + [0] * len(CPU_FIELDS))[: len(CPU_FIELDS)]
        out["cpu"] = dict(zip(CPU_FIELDS, values, strict=True))
        out["cpu"]["total"] = sum(values)  # guest time is inside user already
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[0] == "procs_running" and fields[1].isdigit():
            out["procs_running"] = int(fields[1])
    return out


def parse_loadavg(text):
    """/proc/loadavg -> runnable threads now (the 4th field's numerator), or None."""
    fields = (text or "").split()
    if len(fields) >= 4 and "/" in fields[3]:
        running = fields[3].split("/")[0]
        return int(running) if running.isdigit() else None
    return None


def listen_inodes(text, port):
    """/proc/net/tcp or tcp6 -> socket inodes listening on `port` (any address)."""
    inodes = []
    for line in (text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        try:
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
        except ValueError:
            continue
        if local_port == port and fields[3] == "0A" and fields[9].isdigit():
            inodes.append(int(fields[9]))
    return inodes


def descendants(stats, root):
    """Pids of `root` and everything under it, from {pid: parsed stat} (ppid links)."""
    children = {}
    for pid, stat in stats.items():
        if stat:
            children.setdefault(stat["ppid"], []).append(pid)
    seen, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        todo.extend(children.get(pid, []))
    return seen


def _threads(snapshot):
    """{(pid, tid, starttime): {ticks, comm, pid, tid}} of one snapshot."""
    out = {}
    for pid, proc in ((snapshot or {}).get("procs") or {}).items():
        for tid, task in (proc.get("tasks") or {}).items():
            stat = parse_pid_stat(task.get("stat"))
            if stat:
                comm = (task.get("comm") or "").strip() or stat["comm"]
                key = (int(pid), int(tid), stat["starttime"])
                out[key] = {"ticks": stat["ticks"], "comm": comm, "pid": int(pid), "tid": int(tid)}
    return out


def _proc_ticks(snapshot):
    """{(pid, starttime): ticks} of the processes (their dead threads' time included)."""
    out = {}
    for proc in ((snapshot or {}).get("procs") or {}).values():
        stat = parse_pid_stat(proc.get("stat"))
        if stat:
            out[(stat["pid"], stat["starttime"])] = stat["ticks"]
    return out


def _steal(first, last):
    found = steal_between(cpu_lines(first), cpu_lines(last))
    return found["percent"] if found else None


def _shares(start, end, clk_tck):
    """Each thread's share of one core between two snapshots, busiest first."""
    wall = (end or {}).get("time", 0) - (start or {}).get("time", 0)
    if wall <= 0:
        return []
    before, after = _threads(start), _threads(end)
    shares = []
    for key, thread in after.items():
        ticks = thread["ticks"] - before.get(key, {}).get("ticks", 0)
        shares.append(dict(thread, key=key, share=ticks / clk_tck / wall))
    shares.sort(key=lambda t: -t["share"])
    return shares


def summarize(start, end, samples, clk_tck, output_tokens=None, cpus=None, idle=None):
    """One level from its start and end snapshots and its /proc/stat samples; `idle`, the
    (first, last) snapshots of the quiet second before the load, tells a thread that spins
    with no work at all (SGLang's scheduler polls its sockets at ~100% of a core unless the
    server runs with --sleep-on-idle) from one the load saturates.

    Returns {wall_s, cpu_s, cores, cpu_s_per_token, busiest: {comm, pid, tid, share},
    saturated (threads at THREAD_SATURATED or more that did not spin at idle), idle_spinners
    ([{comm, tid, share}] at THREAD_BUSY or more before the load), threads, steal_pct,
    steal_max_pct, run_queue, cpus}; a value that could not be had is None.
    """
    wall = (end or {}).get("time", 0) - (start or {}).get("time", 0)
    if not start or not end or wall <= 0 or not clk_tck:
        return None
    shares = _shares(start, end, clk_tck)
    spinning = [t for t in _shares(*(idle or (None, None)), clk_tck) if t["share"] >= THREAD_BUSY]
    spun = {t["key"] for t in spinning}
    p0, p1 = _proc_ticks(start), _proc_ticks(end)
    cpu_s = sum(ticks - p0.get(key, 0) for key, ticks in p1.items()) / clk_tck
    stat_texts = [start.get("proc_stat")] + [s.get("proc_stat") for s in samples or []]
    stat_texts.append(end.get("proc_stat"))
    stat_texts = [t for t in stat_texts if t]
    steps = [_steal(a, b) for a, b in pairwise(stat_texts)]
    steps = [s for s in steps if s is not None]
    queue = []
    for sample in samples or []:
        running = parse_proc_stat(sample.get("proc_stat"))["procs_running"]
        if running is None:
            running = parse_loadavg(sample.get("loadavg"))
        if running is not None:
            queue.append(max(running - 1, 0))  # less the sampler reading it
    cpus = cpus or parse_proc_stat(end.get("proc_stat"))["cpus"] or None
    busiest = shares[0] if shares else None
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu_s, 3),
        "cores": round(cpu_s / wall, 3),
        "cpu_s_per_token": cpu_s / output_tokens if output_tokens else None,
        "busiest": (
            {k: busiest[k] for k in ("comm", "pid", "tid")} | {"share": round(busiest["share"], 3)}
            if busiest
            else None
        ),
        "saturated": sum(
            1 for t in shares if t["share"] >= THREAD_SATURATED and t["key"] not in spun
        ),
        "idle_spinners": [
            {"comm": t["comm"], "tid": t["tid"], "share": round(t["share"], 3)} for t in spinning
        ],
        "threads": len(shares),
        "steal_pct": _steal(stat_texts[0], stat_texts[-1]) if len(stat_texts) > 1 else None,
        "steal_max_pct": max(steps) if steps else None,
        "run_queue": sum(queue) / len(queue) if queue else None,
        "cpus": cpus,
    }


def cpu_bound(cpu):
    """Why the CPU side holds the GPU back, as a list of reasons ([]: it does not seem to).

    A server thread with no headroom is one; steal and a run queue longer than the CPU count
    are others only while a server thread works at least half a core: a server whose threads
    sleep is not waiting for a CPU, whatever else the guest runs (the bench client included).
    """
    if not cpu:
        return []
    reasons = []
    share = (cpu.get("busiest") or {}).get("share") or 0
    if cpu.get("saturated"):  # a thread that spun at idle already is no evidence of load
        reasons.append("thread")
    if share >= THREAD_BUSY and (cpu.get("steal_pct") or 0) >= STEAL_BOUND:
        reasons.append("steal")
    queue, cpus = cpu.get("run_queue"), cpu.get("cpus")
    if share >= THREAD_BUSY and queue is not None and cpus and queue >= cpus:
        reasons.append("run_queue")
    return reasons


def evidence(cpu):
    """The CPU-side numbers in words, for the bench's evidence column."""
    if not cpu:
        return ""
    parts = []
    busiest = cpu.get("busiest")
    if busiest:
        parts.append(
            f"busiest server thread {busiest['comm']!r} (pid {busiest['pid']}, tid "
            f"{busiest['tid']}) at {busiest['share'] * 100:.0f}% of a core"
        )
    for spinner in cpu.get("idle_spinners") or []:
        parts.append(
            f"thread {spinner['comm']!r} (tid {spinner['tid']}) spun at "
            f"{spinner['share'] * 100:.0f}% of a core before the load (an idle poll loop, as "
            "SGLang's scheduler without --sleep-on-idle): its share under load is no evidence"
        )
    parts.append(f"server CPU {cpu['cores']:.2f} cores")
    if cpu.get("cpu_s_per_token") is not None:
        parts.append(f"{cpu['cpu_s_per_token'] * 1e3:.3g} CPU ms per output token")
    if cpu.get("steal_pct") is not None:
        parts.append(f"steal {cpu['steal_pct']:.1f}%")
    if cpu.get("run_queue") is not None:
        parts.append(f"run queue {cpu['run_queue']:.1f} for {cpu.get('cpus') or '?'} CPUs")
    return ", ".join(parts)


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _pids(proc):
    try:
        return [int(name) for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return []


class CpuSampler:
    """Reads /proc for one level: start() and stop() snapshot the server's process tree,
    a daemon thread reads /proc/stat and /proc/loadavg every `interval` s in between.

    The server is the unit's MainPID when `unit` is given and running (the whole tree under
    the unit, a launcher included), else the process that holds the listening socket of
    `port` (a server started by hand). Never fails the level: what it cannot read becomes
    `error` in the record.
    """

    def __init__(self, port, unit="", interval=0.5, proc="/proc", idle_s=1.0):
        self.port = int(port)
        self.unit = unit if unit and UNIT.match(unit) else ""
        self.interval = interval
        self.proc = proc
        self.pid = None
        self.how = ""
        self.error = ""
        self.idle_s = idle_s
        self.idle = None
        self.start_snap = None
        self.end_snap = None
        self.samples = []
        self._stop = threading.Event()
        self._thread = None

    def find_server(self):
        if self.unit:
            try:
                shown = subprocess.run(
                    ["systemctl", "show", "-p", "MainPID", "--value", self.unit],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    check=False,
                )
                pid = int(shown.stdout.strip() or 0)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pid = 0
            if pid > 0:
                return pid, f"MainPID of {self.unit}"
        inodes = set()
        for name in ("tcp", "tcp6"):
            inodes.update(listen_inodes(_read(f"{self.proc}/net/{name}"), self.port))
        wanted = {f"socket:[{inode}]" for inode in inodes}
        for pid in sorted(_pids(self.proc)) if wanted else []:
            try:
                fds = os.listdir(f"{self.proc}/{pid}/fd")
            except OSError:
                continue  # another account's process: not ours to look into
            for fd in fds:
                if not fd.isdigit():
                    continue
                try:
                    if os.readlink(f"{self.proc}/{pid}/fd/{int(fd)}") in wanted:
                        return pid, f"listener of port {self.port}"
                except OSError:
                    continue
        return None, ""

    def snapshot(self):
        stats = {pid: parse_pid_stat(_read(f"{self.proc}/{pid}/stat")) for pid in _pids(self.proc)}
        procs = {}
        for pid in sorted(descendants(stats, self.pid)):
            base = f"{self.proc}/{pid}/task"
            tids = _pids(base)
            procs[str(pid)] = {
                "stat": _read(f"{self.proc}/{pid}/stat"),
                "tasks": {
                    str(tid): {
                        "stat": _read(f"{base}/{tid}/stat"),
                        "comm": _read(f"{base}/{tid}/comm"),
                    }
                    for tid in tids
                },
            }
        return {
            "time": time.monotonic(),
            "proc_stat": _read(f"{self.proc}/stat"),
            "loadavg": _read(f"{self.proc}/loadavg"),
            "procs": procs,
        }

    def _run(self):
        while not self._stop.wait(self.interval):
            self.samples.append(
                {
                    "time": time.monotonic(),
                    "proc_stat": _read(f"{self.proc}/stat"),
                    "loadavg": _read(f"{self.proc}/loadavg"),
                }
            )

    def start(self):
        self.pid, self.how = self.find_server()
        if self.pid is None:
            self.error = (
                f"no server process found (unit {self.unit or 'none'}, no listener of port "
                f"{self.port} this account can see): no CPU samples"
            )
            return
        # The quiet second before the load: which threads spin with no work at all.
        first = self.snapshot()
        time.sleep(self.idle_s)
        self.start_snap = self.snapshot()
        self.idle = (first, self.start_snap)
        self._thread = threading.Thread(target=self._run, name="gpuhost-cpu-sampler", daemon=True)
        self._thread.start()

    def stop(self):
        """The level's end: its last snapshot, the sampling thread stopped."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self.end_snap = self.snapshot()

    def record(self, output_tokens=None):
        """The level's CPU record, once its output tokens are known."""
        summary = None
        if self.end_snap is not None:
            summary = summarize(
                self.start_snap, self.end_snap, self.samples, os.sysconf("SC_CLK_TCK"),
                output_tokens, idle=self.idle,
            )  # fmt: skip
        return {
            "source": f"/proc, server pid {self.pid} ({self.how})" if self.pid else "",
            "error": self.error,
            "summary": summary,
        }
