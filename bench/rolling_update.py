#!/usr/bin/env python3
"""Rolling update under load behind a real router: requests sent, failed, duration.

Three workers run role sglang_server with the STAND-IN server (tests/standin/, a test double
of SGLang's HTTP contract and its rank protocol across nodes; no GPU here) as real systemd
units in containers: w1 on its own, w2 and w3 as one server across two nodes (serving group
"pair": w2 rank 0, the router's one worker for the pair, w3 rank 1); a fourth runs
role sglang_router (the real router from PyPI: smg 1.13.0, the role's default package, or
sglang-router 0.3.2 with sglang_router_package). The router shares this machine's network
namespace and listens on 127.0.0.1; the workers sit on the scenario's own network at fixed
addresses, with an API key and the real port rule, which admits the router only
(molecule/rolling_update/molecule.yml).

While a steady client load goes through the router (loopback only, bounded in count and
time, stopping by itself), the bench runs the real `gpuhost update` (playbooks/update.yml)
in phases:
  1. a flag, a lock, a model revision, an NCCL env and a driver branch change on all three
     workers at once, in two units: w1, then the pair together (the workers' venvs come from
     small hashed test locks, tests/standin/locks/, and the stand-in runs from the venv's
     Python; the revision comes from the hf stand-in, and the stand-in server refuses a
     --revision that is not in the cache; the driver from the stand-in NVIDIA repository, 570
     -> 580): every host starts the download beside the serving revision, then one at a time
     each builds the new lock's venv beside the serving one, writes nccl.env, waits for its
     download, is drained from the router, stopped, gets the new driver (the reboot it needs
     is recorded, not performed, in a container), starts on the new venv, revision and NCCL
     env, is gated on health and the correctness query, and re-added (the pair: rank 0
     drained, both stopped, both started, rank 0 gated on health and the query, rank 1 on
     having joined). Targets: 0 failed requests; never fewer than one of the router's two
     workers in its pool; each row says flags, model, venv, nccl, driver; every server runs
     the new venv, revision and NCCL env on driver 580; the old venv and the old revision are
     kept.
  1b. the pair alone (--limit w2,w3) with a config in which rank 1 never joins rank 0 (the
     stand-in's never-joins fault: as when a port rule drops the dist-init port): the pair's
     gate fails naming w3 as rank 1, both nodes roll back to the config they ran and serve
     again. Targets: exit 1; both rows rolled_back; both back on their unit, active; 0 failed
     requests (w1 serves meanwhile).
  2. a bad config (the stand-in's never-healthy fault, set through the server env):
     the first worker fails its gate, sglang_server rolls it back, the rollout stops.
     Targets: 0 failed requests; the other two workers keep their MainPID and unit file.
  2b. a bad lock (its venv fails verification): the first worker stops before its drain,
     the rollout stops. Targets: 0 failed requests; nothing of the first worker changed
     (MainPID, unit, the serving venv's marker, the link); the others not reached.
  3. `gpuhost rollback` (w1, then the pair as one unit): every host back to the config before
     the first phase, all parts at once: the old venv (switched back, not reinstalled: its
     marker is the one it had), the old revision, the old NCCL env (the server's and
     nccl.env).
  4. a slow start: the first worker's new config takes SLOW_LOAD_S s to load (the stand-in's
     SGLANG_STANDIN_LOAD_SECONDS) while the scenario's fixed gate timeout is 20 s; with
     sglang_server_start_timeout 0 the gate waits 4x the expected start (start_seconds
     SLOW_EXPECTED_S) instead, so the start is waited for, not failed. Targets: exit 0, 0
     failed requests. (The rollback under load is phase 3's: a second one here, back to the
     fast config, cost ~34 s of make test and proved nothing phase 3 does not.)
The reference in the same run: the same load with no update (requests per second).

Usage:
  bench/rolling_update.py --start-containers         # molecule create+converge, bench, destroy
  bench/rolling_update.py --start-containers --keep  # leave the scenario up afterwards
  bench/rolling_update.py --inventory DIR  # an already converged rolling_update scenario

It finds the project's tools itself (scripts/project_tools.py): run it with the venv's
python, no activated venv needed. GPUHOST_SETUP_CHECK=1 stops after the setup check.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The one helper that finds the project's tools, loaded by its path (no sys.path edits).
_spec = importlib.util.spec_from_file_location("project_tools", REPO / "scripts/project_tools.py")
project_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(project_tools)

SCRIPT = "bench/rolling_update.py"
# What the bench runs: molecule (which calls ansible-config and ansible-playbook), the
# gpuhost CLI, and docker with the base image the scenario's containers start from.
REQUIRES = [
    "molecule",
    "ansible-config",
    "ansible-playbook",
    "gpuhost",
    "docker-daemon",
    "image:gpuhost/debian:12",
    "image:gpuhost/debian:13",
]
SCENARIO = "rolling_update"
# What molecule create starts (unless --inventory names a converged scenario).
CONTAINERS = "the rolling_update scenario: a router, a worker and a two-node serving group"
ROUTER = ("127.0.0.1", 38100)
ROUTER_ADMIN_KEY = "gpuhost-test-routerkey-3c1f9a"  # molecule/rolling_update host_vars
# The workers' API key, which the router also asks of its clients (molecule/rolling_update
# group_vars/gpu_hosts.yml and the router's host_vars).
WORKER_KEY = "gpuhost-test-workerkey-7d2e41"
WORKERS = [f"gpuhost-{SCENARIO}-w{i}" for i in (1, 2, 3)]
# The serving group "pair" (molecule/rolling_update/group_vars/pair.yml): rank 0, rank 1.
PAIR = WORKERS[1:]
# The router's workers: w1 and the pair's rank 0.
ROUTED = WORKERS[:2]
# The NCCL change of phase 1 (an extra var, templated on each host): the pair keeps the
# interface its nodes share (molecule/rolling_update group_vars: _scenario_nccl_group).
NCCL_OVERRIDES = "{{ _scenario_nccl_group | combine({'NCCL_DEBUG': 'LEVEL'}) }}"
SERVICE = "sglang-server"
PROMPT, EXPECT = "What is 17 + 25?", "42"
# The slow-start phase: seconds the stand-in loads, and the expected start the update states
# (the gate waits 4x that: gpuhost_profile.start_timeout). 20 s is the scenario's fixed timeout.
SLOW_LOAD_S, SLOW_EXPECTED_S, FIXED_TIMEOUT_S = 25, 10, 20
# The workers' locks (molecule/rolling_update group_vars: standin-a) and their venvs.
LOCKS = REPO / "tests" / "standin" / "locks"
LOCK_A, LOCK_B, LOCK_BROKEN = (LOCKS / f"standin-{name}.txt" for name in ("a", "b", "broken"))
VENVS_DIR, VENV_LINK = "/opt/gpuhost/venvs", "/opt/gpuhost/venv"
# The stand-in hub's model (molecule/rolling_update group_vars) and two revisions pinned by
# sha: the first phase moves to whichever the workers do not serve.
MODEL_DIR = "/var/cache/gpuhost/huggingface/hub/models--standin--tiny-model"
REVISIONS = ("0c5d6a51f8f2b4c3d9e1a7b6c5d4e3f2a1b0c9d8", "7e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f")
SERVER_ENV, NCCL_ENV = "/etc/gpuhost/sglang-server.env", "/etc/gpuhost/nccl.env"
# The workers' driver branch (molecule/rolling_update group_vars) and the one the bench rolls
# out; the stand-in repository's newest release of it.
DRIVER_BRANCH, DRIVER_RELEASE = 580, "580.105.08-1"


def venv_of(lock: Path) -> str:
    """The venv role python_env builds for a lock (gpuhost_python_env.venv_name)."""
    return f"{VENVS_DIR}/{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}"


@dataclass
class Load:
    """Client threads sending chat completions through the router until stopped or a bound
    is hit. Loopback only: the host and port are the router's."""

    concurrency: int = 4
    max_requests: int = 100_000
    max_seconds: float = 600.0
    # Requests per second of all clients together; 0: each client sends its next request as
    # soon as the last one is answered (the most load the router and workers take).
    pace: float = 0.0
    sent: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    def _take(self) -> bool:
        with self.lock:
            if self.sent >= self.max_requests or self.stop.is_set():
                return False
            if time.monotonic() - self.started > self.max_seconds:
                self.stop.set()
                return False
            self.sent += 1
            return True

    def _fail(self, why: str) -> None:
        with self.lock:
            self.failed += 1
            if len(self.errors) < 20:
                self.errors.append(f"{time.monotonic() - self.started:7.2f}s {why}")

    def _client(self) -> None:
        conn = None
        body = json.dumps(
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": 16,
                "temperature": 0,
            }
        )
        interval = self.concurrency / self.pace if self.pace > 0 else 0.0
        due = time.monotonic()
        while True:
            if interval:
                due += interval
                self.stop.wait(max(0.0, due - time.monotonic()))
            if not self._take():
                break
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(*ROUTER, timeout=60)
                conn.request(
                    "POST",
                    "/v1/chat/completions",
                    body,
                    {"Content-Type": "application/json", "Authorization": f"Bearer {WORKER_KEY}"},
                )
                resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200:
                    self._fail(f"HTTP {resp.status}: {data[:120]!r}")
                    continue
                text = json.loads(data)["choices"][0]["message"]["content"]
                if EXPECT not in text:
                    self._fail(f"wrong answer: {text[:80]!r}")
            except (OSError, http.client.HTTPException, ValueError, KeyError) as exc:
                self._fail(f"{type(exc).__name__}: {exc}")
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def start(self) -> Load:
        self.started = time.monotonic()
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._client, name=f"load-{index}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def finish(self) -> Load:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=90)
        self.ended = time.monotonic()
        return self

    @property
    def rate(self) -> float:
        return self.sent / max(self.ended - self.started, 1e-9)


def sh(*argv: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, text=True, capture_output=True, **kwargs)


def unit_state(container: str) -> dict:
    """MainPID, start time and unit checksum of the server unit inside one container."""
    show = sh(
        "docker",
        "exec",
        container,
        "systemctl",
        "show",
        SERVICE,
        "-p",
        "MainPID",
        "-p",
        "ExecMainStartTimestampMonotonic",
        "-p",
        "ActiveState",
    ).stdout
    state = dict(line.split("=", 1) for line in show.strip().splitlines())
    unit = sh("docker", "exec", container, "sha256sum", f"/etc/systemd/system/{SERVICE}.service")
    state["unit_sha256"] = unit.stdout.split()[0]
    return state


def server_python(container: str) -> str:
    """The interpreter the running server was started with (argv[0] of its MainPID)."""
    pid = sh("docker", "exec", container, "systemctl", "show", SERVICE, "-p", "MainPID", "--value")
    argv = sh("docker", "exec", container, "cat", f"/proc/{pid.stdout.strip()}/cmdline").stdout
    return argv.split("\0")[0]


def venv_state(container: str) -> dict:
    """Where the link leads and each kept venv's marker time (a reinstall rewrites it)."""
    script = (
        f"readlink {VENV_LINK}; for m in {VENVS_DIR}/*/gpuhost-env.json; "
        'do [ -e "$m" ] && echo "$(dirname "$m") $(stat -c %Y "$m")"; done; true'
    )
    lines = sh("docker", "exec", container, "sh", "-c", script).stdout.splitlines()
    return {
        "link": lines[0] if lines else "",
        "markers": dict(line.split(" ", 1) for line in lines[1:]),
    }


def _value(text: str, pattern: str) -> str:
    found = re.search(pattern, text, re.MULTILINE)
    return found.group(1) if found else ""


def server_config(container: str) -> dict:
    """The parts the first phase changes besides flags and venv, as the host holds them: the
    revision in the unit (main when none is pinned), NCCL_DEBUG in the server's env and in
    nccl.env, and the revisions the hub cache holds."""
    unit = sh("docker", "exec", container, "cat", f"/etc/systemd/system/{SERVICE}.service").stdout
    env = sh("docker", "exec", container, "cat", SERVER_ENV).stdout
    nccl = sh("docker", "exec", container, "cat", NCCL_ENV, check=False).stdout
    snapshots = sh("docker", "exec", container, "ls", f"{MODEL_DIR}/snapshots", check=False)
    return {
        "revision": _value(unit, r"--revision[ =]+\"?([0-9A-Za-z._/-]+)") or "main",
        "nccl_debug": _value(env, r"^NCCL_DEBUG=(\S+)$"),
        "nccl_env_file": _value(nccl, r"^NCCL_DEBUG=(\S+)$"),
        "snapshots": sorted(snapshots.stdout.split()),
    }


def driver_release(container: str) -> str:
    """The installed nvidia-open package's version ("" when none)."""
    query = ["dpkg-query", "-W", "-f", "${Version}", "nvidia-open"]
    return sh("docker", "exec", container, *query, check=False).stdout.strip()


@dataclass
class PoolWatch:
    """Polls the router's worker list while a phase runs: the fewest healthy workers seen."""

    interval: float = 0.5
    fewest: int = 99
    samples: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def _poll(self) -> None:
        while not self.stop.is_set():
            try:
                healthy = sum(w["healthy"] for w in router_workers())
            except (OSError, ValueError, KeyError):
                healthy = 0  # the router did not answer: nobody is served
            self.fewest, self.samples = min(self.fewest, healthy), self.samples + 1
            self.stop.wait(self.interval)

    def start(self) -> PoolWatch:
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def finish(self) -> PoolWatch:
        self.stop.set()
        if self.thread:
            self.thread.join(timeout=15)
        return self


def router_workers() -> list[dict]:
    conn = http.client.HTTPConnection(*ROUTER, timeout=10)
    conn.request("GET", "/workers", headers={"Authorization": f"Bearer {ROUTER_ADMIN_KEY}"})
    data = json.loads(conn.getresponse().read())
    conn.close()
    return sorted(
        ({"url": w["url"], "healthy": w["is_healthy"]} for w in data["workers"]),
        key=lambda w: w["url"],
    )


def gpuhost(command: str, inventory: Path, runs: Path, *args: str) -> tuple[int, float, dict]:
    """The real CLI: `gpuhost COMMAND -i INV ARGS --json`; returns rc, seconds, report."""
    env = {**os.environ, "GPUHOST_RUNS_DIR": str(runs), "MOLECULE_PROJECT_DIRECTORY": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run(
        ["gpuhost", command, "-i", str(inventory), *args, "--json"],
        text=True,
        capture_output=True,
        env=env,
        timeout=1500,
        check=False,
    )
    seconds = time.monotonic() - started
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = {"status": "no report", "stderr": proc.stderr[-2000:]}
    return proc.returncode, seconds, report


def gpuhost_update(inventory: Path, extra: dict, runs: Path) -> tuple[int, float, dict]:
    return gpuhost("update", inventory, runs, "-e", json.dumps(extra))


def report_configs(report: dict, key: str) -> dict:
    return {h: r.get(key) for h, r in (report.get("rollout") or {}).items()}


def measured(rc: int, seconds: float, load: Load, report: dict) -> dict:
    """What every phase records: the command's outcome, the load it ran under, per-host state."""
    return {
        "rc": rc,
        "update_s": round(seconds, 1),
        "sent": load.sent,
        "failed": load.failed,
        "req_per_s": round(load.rate, 1),
        "errors": load.errors,
        "rollout": {h: r["state"] for h, r in (report.get("rollout") or {}).items()},
        "changed": {h: r.get("changed") for h, r in (report.get("rollout") or {}).items()},
    }


def under_load(load: Load, action):
    """Run action() while the load runs; the load starts 2 s before and ends 2 s after."""
    load.start()
    time.sleep(2)
    try:
        result = action()
    finally:
        time.sleep(2)
        load.finish()
    return result


def measure(
    inventory: Path,
    runs: Path,
    concurrency: int,
    max_seconds: float,
    with_rollback: bool = True,
    rate: float = 0.0,
) -> dict:
    """All three phases; returns the numbers and the checks (True = target met). rate: the
    load's requests per second (0: as fast as the clients go)."""

    def new_load(seconds: float = max_seconds) -> Load:
        return Load(concurrency=concurrency, max_seconds=seconds, pace=rate)

    results: dict = {"router_workers": router_workers(), "rate": rate}
    reference = new_load(10.0).start()
    time.sleep(10)
    reference.finish()
    results["reference"] = {
        "sent": reference.sent,
        "failed": reference.failed,
        "req_per_s": round(reference.rate, 1),
    }

    # A flag value that differs from whatever the previous run left, and the other test lock.
    flags = {"--max-running-requests": 17 + int(time.time()) % 40}
    # A revision and an NCCL_DEBUG value the first worker does not run yet.
    parts_before = {name: server_config(name) for name in WORKERS}
    revision = next(r for r in REVISIONS if r != parts_before[WORKERS[0]]["revision"])
    nccl_debug = "INFO" if parts_before[WORKERS[0]]["nccl_debug"] == "WARN" else "WARN"
    driver = {"nvidia_driver_branch": DRIVER_BRANCH}
    lock_b = {
        "python_env_lock_file": str(LOCK_B),
        "sglang_server_revision": revision,
        "nccl_env_overrides": NCCL_OVERRIDES.replace("LEVEL", nccl_debug),
        **driver,
    }
    venvs_before = {name: venv_state(name) for name in WORKERS}
    drivers_before = {name: driver_release(name) for name in WORKERS}
    load = new_load()
    pool = PoolWatch().start()
    try:
        rc, seconds, report = under_load(
            load, lambda: gpuhost_update(inventory, {"sglang_server_flags": flags, **lock_b}, runs)
        )
    finally:
        pool.finish()
    config_before_good = report_configs(report, "previous")
    venvs_after = {name: venv_state(name) for name in WORKERS}
    parts_after = {name: server_config(name) for name in WORKERS}
    results["good"] = {
        **measured(rc, seconds, load, report),
        "server_python": {name: server_python(name) for name in WORKERS},
        "parts_before": parts_before,
        "parts_after": parts_after,
        "drivers_before": drivers_before,
        "drivers_after": {name: driver_release(name) for name in WORKERS},
        "driver_activation": {
            name: (act or {}).get("outcome")
            for name, act in (report.get("driver_activation") or {}).items()
        },
        "fewest_in_pool": pool.fewest,
        "pool_samples": pool.samples,
        "old_venv_kept": {
            name: venvs_after[name]["markers"].get(venv_of(LOCK_A))
            == venvs_before[name]["markers"].get(venv_of(LOCK_A))
            is not None
            for name in WORKERS
        },
        "report": report.get("run_dir"),
    }

    results["group"] = never_joins(inventory, runs, new_load, flags, lock_b)

    before = {name: unit_state(name) for name in WORKERS}
    bad = {
        "sglang_server_flags": flags,
        "sglang_server_extra_env": {"SGLANG_STANDIN_FAULT": "never-healthy"},
        **lock_b,
    }
    load = new_load()
    rc, seconds, report = under_load(load, lambda: gpuhost_update(inventory, bad, runs))
    after = {name: unit_state(name) for name in WORKERS}
    results["bad"] = {
        **measured(rc, seconds, load, report),
        "untouched": {
            name: before[name]["MainPID"] == after[name]["MainPID"]
            and before[name]["unit_sha256"] == after[name]["unit_sha256"]
            for name in WORKERS[1:]
        },
        "first_restored": after[WORKERS[0]]["unit_sha256"] == before[WORKERS[0]]["unit_sha256"]
        and after[WORKERS[0]]["ActiveState"] == "active",
        "report": report.get("run_dir"),
    }
    results["bad_lock"] = bad_lock(inventory, runs, new_load, flags, lock_b)
    if with_rollback:
        # `gpuhost rollback` on the fleet, w1 then the pair as one unit: back to the config
        # each ran before the flag and lock change (the good update kept it), drained and
        # gated, under the same load.
        load = new_load()
        rc, seconds, report = under_load(load, lambda: gpuhost("rollback", inventory, runs))
        w1_venvs = venv_state(WORKERS[0])
        results["rollback"] = {
            **measured(rc, seconds, load, report),
            "parts": server_config(WORKERS[0]),
            "back_to_config_before_update": all(
                report_configs(report, "config").get(name) == config_before_good.get(name)
                for name in WORKERS
            ),
            "server_python": server_python(WORKERS[0]),
            # Switched back, not reinstalled: the old venv's marker is the one it had.
            "old_venv_not_reinstalled": w1_venvs["markers"].get(venv_of(LOCK_A))
            == venvs_before[WORKERS[0]]["markers"].get(venv_of(LOCK_A)),
            "report": report.get("run_dir"),
        }
    if with_rollback:
        results.update(slow_start(inventory, runs, new_load, flags, driver))
    results["router_workers_after"] = router_workers()
    results["checks"] = {
        "good: update succeeded on all three": rc_ok(results["good"], "updated"),
        "good: 0 requests failed": results["good"]["failed"] == 0,
        "good: each row says the flags, model, venv, nccl and driver changed": results["good"][
            "changed"
        ]
        == {name: ["flags", "model", "venv", "nccl", "driver"] for name in WORKERS},
        f"good: every worker moved to driver {DRIVER_RELEASE}, the reboot recorded, not done": (
            all(results["good"]["drivers_before"][name] != DRIVER_RELEASE for name in WORKERS)
            and results["good"]["drivers_after"] == dict.fromkeys(WORKERS, DRIVER_RELEASE)
            and results["good"]["driver_activation"] == dict.fromkeys(WORKERS, "reboot needed")
        ),
        "good: never fewer than one of the two workers healthy in the router's pool": results[
            "good"
        ]["fewest_in_pool"]
        >= len(ROUTED) - 1
        and results["good"]["pool_samples"] >= 10,
        "good: every server runs the new revision and NCCL env (server env and nccl.env)": all(
            results["good"]["parts_after"][name]["revision"] == revision
            and results["good"]["parts_after"][name]["nccl_debug"] == nccl_debug
            and results["good"]["parts_after"][name]["nccl_env_file"] == nccl_debug
            for name in WORKERS
        ),
        "good: the old revision stays in the cache beside the new one": all(
            set(results["good"]["parts_before"][name]["snapshots"])
            < set(results["good"]["parts_after"][name]["snapshots"])
            and revision in results["good"]["parts_after"][name]["snapshots"]
            for name in WORKERS
        ),
        "good: every server runs from the new lock's venv": results["good"]["server_python"]
        == {name: f"{venv_of(LOCK_B)}/bin/python" for name in WORKERS},
        "good: the old venv is kept, untouched": all(results["good"]["old_venv_kept"].values()),
        "bad: rollout failed (exit 1)": results["bad"]["rc"] == 1,
        "bad: first host rolled back, others not reached": results["bad"]["rollout"]
        == {WORKERS[0]: "rolled_back", WORKERS[1]: "not_reached", WORKERS[2]: "not_reached"},
        "bad: other two untouched (MainPID, unit)": all(results["bad"]["untouched"].values()),
        "bad: first host back on its old unit, active": results["bad"]["first_restored"],
        "bad: 0 requests failed": results["bad"]["failed"] == 0,
        "bad: the first host's row says the env changed": results["bad"]["changed"].get(WORKERS[0])
        == ["env"],
        "bad lock: rollout failed (exit 1), first host kept its config": bad_lock_ok(
            results["bad_lock"]
        ),
        "bad lock: the row names the requirement uv pip check found missing (six)": "six"
        in results["bad_lock"]["cause"],
        "bad lock: first host untouched (MainPID, unit, serving venv, link)": results["bad_lock"][
            "untouched"
        ],
        "bad lock: 0 requests failed": results["bad_lock"]["failed"] == 0,
        "router: its two workers (w1, the pair's rank 0) healthy at the end": len(
            results["router_workers_after"]
        )
        == len(ROUTED)
        and all(w["healthy"] for w in results["router_workers_after"]),
        "group: the pair's update failed (exit 1), both nodes rolled back": results["group"]["rc"]
        == 1
        and results["group"]["rollout"] == dict.fromkeys(PAIR, "rolled_back"),
        "group: the failure names w3 as rank 1 that failed its gate": results["group"]["named"],
        "group: both nodes back on their unit, active, rank 1 joined again": results["group"][
            "restored"
        ],
        "group: 0 requests failed": results["group"]["failed"] == 0,
    }
    if with_rollback:
        rollback = results["rollback"]
        results["checks"].update(
            {
                "rollback: w1 and both nodes of the pair restored, exit 0": rollback["rc"] == 0
                and rollback["rollout"] == dict.fromkeys(WORKERS, "restored"),
                "rollback: every host back on the config before the flag change": rollback[
                    "back_to_config_before_update"
                ],
                "rollback: the server runs from the old venv again, not reinstalled": rollback[
                    "server_python"
                ]
                == f"{venv_of(LOCK_A)}/bin/python"
                and rollback["old_venv_not_reinstalled"],
                "rollback: 0 requests failed": rollback["failed"] == 0,
                "rollback: the old revision and NCCL env again (server env and nccl.env)": {
                    key: rollback["parts"][key]
                    for key in ("revision", "nccl_debug", "nccl_env_file")
                }
                == {
                    key: results["good"]["parts_before"][WORKERS[0]][key]
                    for key in ("revision", "nccl_debug", "nccl_env_file")
                },
            }
        )
        slow = results["slow"]
        results["checks"].update(
            {
                f"slow: a {SLOW_LOAD_S} s start was waited for (first host updated, exit 0)": slow[
                    "rc"
                ]
                == 0
                and slow["rollout"] == {WORKERS[0]: "updated"},
                f"slow: the gate waited past the fixed {FIXED_TIMEOUT_S} s timeout": slow[
                    "update_s"
                ]
                >= SLOW_LOAD_S,
                "slow: 0 requests failed": slow["failed"] == 0,
            }
        )
    return results


def never_joins(inventory: Path, runs: Path, new_load, flags: dict, same: dict) -> dict:
    """Phase 1b: the pair alone, with a config in which rank 1 never joins rank 0 (the
    stand-in's never-joins fault: it loads, then never reaches rank 0's dist-init port)."""
    before = {name: unit_state(name) for name in PAIR}
    bad = {
        **same,
        "sglang_server_flags": flags,
        "sglang_server_extra_env": {"SGLANG_STANDIN_FAULT": "never-joins"},
    }
    load = new_load()
    rc, seconds, report = under_load(
        load,
        lambda: gpuhost(
            "update", inventory, runs, "--limit", ",".join(PAIR), "-e", json.dumps(bad)
        ),
    )
    after = {name: unit_state(name) for name in PAIR}
    messages = " ".join(
        str(((report.get("rollout") or {}).get(name) or {}).get("message") or "") for name in PAIR
    )
    return {
        **measured(rc, seconds, load, report),
        "named": f"{PAIR[1]} (rank 1 of serving group pair) failed its gate" in messages,
        "restored": all(
            after[name]["unit_sha256"] == before[name]["unit_sha256"]
            and after[name]["ActiveState"] == "active"
            for name in PAIR
        )
        and any(w["url"].endswith(":38102") and w["healthy"] for w in router_workers()),
        "message": messages[:600],
        "report": report.get("run_dir"),
    }


def bad_lock_ok(phase: dict) -> bool:
    return phase["rc"] == 1 and phase["rollout"] == {
        WORKERS[0]: "rolled_back",
        WORKERS[1]: "not_reached",
        WORKERS[2]: "not_reached",
    }


def bad_lock(inventory: Path, runs: Path, new_load, flags: dict, same: dict) -> dict:
    """Phase 2b: a lock whose venv fails verification (uv pip check) on the first worker;
    `same` keeps the other parts as the first phase left them."""
    first = WORKERS[0]
    before, venvs = unit_state(first), venv_state(first)
    broken = {**same, "sglang_server_flags": flags, "python_env_lock_file": str(LOCK_BROKEN)}
    load = new_load()
    rc, seconds, report = under_load(load, lambda: gpuhost_update(inventory, broken, runs))
    after, venvs_after = unit_state(first), venv_state(first)
    return {
        **measured(rc, seconds, load, report),
        "cause": str(((report.get("rollout") or {}).get(first) or {}).get("message") or ""),
        "untouched": before["MainPID"] == after["MainPID"]
        and before["unit_sha256"] == after["unit_sha256"]
        and venvs == venvs_after
        and venvs_after["link"] == venv_of(LOCK_B),
        "report": report.get("run_dir"),
    }


def slow_start(inventory: Path, runs: Path, new_load, flags: dict, driver: dict) -> dict:
    """Phase 4: a worker that loads for SLOW_LOAD_S s, rolled out under load (`driver`: the
    branch phase 1 left, which a rollback does not undo)."""
    slow = {
        **driver,
        "sglang_server_flags": flags,
        "sglang_server_extra_env": {"SGLANG_STANDIN_LOAD_SECONDS": str(SLOW_LOAD_S)},
        "sglang_server_start_timeout": 0,
        "sglang_server_start_seconds": SLOW_EXPECTED_S,
    }
    load = new_load()
    rc, seconds, report = under_load(
        load,
        lambda: gpuhost("update", inventory, runs, "--limit", WORKERS[0], "-e", json.dumps(slow)),
    )
    return {"slow": {**measured(rc, seconds, load, report), "report": report.get("run_dir")}}


def rc_ok(phase: dict, state: str) -> bool:
    return (
        phase["rc"] == 0
        and set(phase["rollout"].values()) == {state}
        and len(phase["rollout"]) == len(WORKERS)
    )


def molecule(action: str) -> None:
    print(f"bench: molecule {action} -s {SCENARIO} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(
        ["molecule", action, "-s", SCENARIO],
        cwd=REPO,
        text=True,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"bench: molecule {action} failed")


def molecule_inventory() -> Path:
    found = sorted(Path.home().glob(f".ansible/tmp/molecule.*.{SCENARIO}/inventory"))
    if not found:
        raise SystemExit("bench: no molecule inventory for the scenario; run without --inventory")
    return found[-1]


def print_results(results: dict) -> None:
    ref = results["reference"]
    paced = f", paced at {results['rate']:g} req/s" if results.get("rate") else ""
    print(
        f"reference (no update, 10 s{paced}): {ref['sent']} requests, {ref['failed']} failed, "
        f"{ref['req_per_s']} req/s"
    )
    phases = (
        ("good", "flag, lock, model revision, NCCL env and driver change on w1 and the pair"),
        ("group", "the pair with a rank that never joins (--limit w2,w3)"),
        ("bad", "bad config"),
        ("bad_lock", "bad lock (its venv fails verification)"),
        ("rollback", "gpuhost rollback (w1, then the pair as one unit)"),
        ("slow", f"slow start ({SLOW_LOAD_S} s) on w1"),
    )
    for phase, title in phases:
        if phase not in results:
            continue
        r = results[phase]
        ratio = r["req_per_s"] / ref["req_per_s"] if ref["req_per_s"] else 0.0
        print(
            f"{title}: requests sent {r['sent']}, requests failed {r['failed']}, "
            f"update duration {r['update_s']} s (exit {r['rc']}), "
            f"{r['req_per_s']} req/s = {ratio:.2f}x the reference; rollout {r['rollout']}"
        )
        for line in r["errors"]:
            print(f"    {line}")
    for name, ok in results["checks"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, help="a converged rolling_update scenario")
    parser.add_argument("--keep", action="store_true", help="leave the scenario up")
    parser.add_argument("--concurrency", type=int, default=4, help="client threads (1-16)")
    parser.add_argument(
        "--max-seconds", type=float, default=600.0, help="upper bound of one load phase (10-900 s)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="requests per second of all clients together (0, the default: as fast as they go)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--no-rollback", action="store_true", help="skip the rollback phase")
    project_tools.add_start_flag(parser, CONTAINERS)
    args = parser.parse_args()
    if not 1 <= args.concurrency <= 16 or not 10 <= args.max_seconds <= 900:
        parser.error("--concurrency 1-16 and --max-seconds 10-900 keep the load bounded")
    if not 0 <= args.rate <= 10_000:
        parser.error(f"--rate {args.rate}: allowed are 0 (unpaced) to 10000 requests per second")
    project_tools.setup(SCRIPT, REQUIRES)
    project_tools.setup_check_done(SCRIPT)
    own = args.inventory is None
    if own:
        project_tools.confirm_containers(SCRIPT, args.start_containers, CONTAINERS)
        molecule("create")
        molecule("converge")
    try:
        inventory = args.inventory or molecule_inventory()
        runs = REPO / ".cache" / "bench-runs"
        results = measure(
            inventory, runs, args.concurrency, args.max_seconds, not args.no_rollback, args.rate
        )
    finally:
        if own and not args.keep:
            molecule("destroy")
    print_results(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0 if all(results["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
