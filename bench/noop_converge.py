#!/usr/bin/env python3
"""A no-op site.yml converge against the one-task floor, paired runs on one container.

On a provisioned sandbox (a systemd container that stands in for a fresh VM, reached with the
docker connection, the sandbox inventory's settings: inventory/sandbox/group_vars), nothing to
change, each pair runs, in alternating order:

  floor  ansible-playbook with one task (ansible.builtin.command true, no facts) on the same
         host: what any play costs here (Python start, inventory, one connection round trip);
  noop   ansible-playbook site.yml, exactly as a user re-runs it (every stage, every check).

Prints each wall time, the medians and noop/floor. Target (issue 29): <= 12x. Each no-op run
must report changed=0; after the timed pairs a hand-edited server unit must be found and put
back by the next converge (drift detection intact), and the converge after that is a no-op
again. Not part of `make test` (~8 min here).

    .venv/bin/python bench/noop_converge.py --start-containers [--pairs 3] [--keep]

It checks what it needs first (the venv, the docker daemon, the base image) and says in one
line what to run; it starts its container (gpuhost-noop-bench, its own name, so `make demo`
and molecule may run beside it) only with --start-containers (or "y" at the prompt on a
terminal). GPUHOST_SETUP_CHECK=1 stops after the setup check. Exit 0 when the target holds
and every check passed, 1 when not, 2 on a setup error.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The one helper that finds the project's tools, loaded by its path.
_spec = importlib.util.spec_from_file_location("project_tools", REPO / "scripts/project_tools.py")
project_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(project_tools)

SCRIPT = "bench/noop_converge.py"
TARGET = 12.0
WHAT = "one systemd sandbox container (gpuhost-noop-bench)"
NAME = "gpuhost-noop-bench"
IMAGE = "gpuhost/debian:12"
# The bench's inventory sits two folders below the checkout, as inventory/sandbox does, so the
# sandbox's settings apply as they are; the container gets the sandbox's test doubles
# (tests/blank/sandbox.py standin_doubles) before the first converge.
WORK = REPO / ".cache" / "noop-bench"
UNIT = "/etc/systemd/system/sglang-server.service"
DRIFT_MARK = "# hand edit by bench/noop_converge.py"

INVENTORY = f"""\
# Written by {SCRIPT}: the sandbox's settings on the bench's own container.
all:
  children:
    gpu_hosts:
      hosts:
        {NAME}:
          ansible_connection: community.docker.docker
          ansible_python_interpreter: /usr/bin/python3
"""

FLOOR = """\
- name: One task, the floor of any play on this host
  hosts: gpu_hosts
  gather_facts: false
  tasks:
    - name: Run true
      ansible.builtin.command: "true"
      changed_when: false
"""

RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")


def sh(*argv: str, check: bool = True) -> str:
    return subprocess.run(argv, check=check, capture_output=True, text=True).stdout


def load_sandbox():
    """tests/blank/sandbox.py (the harness that starts systemd containers), by its path."""
    spec = importlib.util.spec_from_file_location("sandbox", REPO / "tests/blank/sandbox.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_inventory() -> tuple[Path, Path]:
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "hosts.yml").write_text(INVENTORY)
    link = WORK / "group_vars"
    if not link.is_symlink():
        link.symlink_to(Path("..", "..", "inventory", "sandbox", "group_vars"))
    (WORK / "floor.yml").write_text(FLOOR)
    return WORK / "hosts.yml", WORK / "floor.yml"


def play(playbook: Path, inventory: Path, log: str) -> dict:
    """One ansible-playbook run: wall seconds and the recap of the bench host; its output is
    kept in WORK/<log>.log (profile_tasks' per-task times: where the seconds go)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    start = time.monotonic()
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), str(playbook)],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - start
    (WORK / f"{log}.log").write_text(proc.stdout + proc.stderr)
    recap = {}
    for line in proc.stdout.splitlines():
        found = RECAP.match(line)
        if found and found.group(1) == NAME:
            ok, changed, unreachable, failed = map(int, found.groups()[1:])
            recap = {"ok": ok, "changed": changed, "unreachable": unreachable, "failed": failed}
    if proc.returncode != 0 or not recap:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"{playbook.name} failed (rc {proc.returncode}):\n{tail}")
    return {"seconds": seconds, **recap}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="paired runs (default 3)")
    parser.add_argument("--keep", action="store_true", help="leave the container running")
    project_tools.add_start_flag(parser, WHAT)
    args = parser.parse_args()
    project_tools.setup(SCRIPT, ["ansible-playbook", "docker-daemon", f"image:{IMAGE}"])
    project_tools.setup_check_done(SCRIPT)
    project_tools.confirm_containers(SCRIPT, args.start_containers, WHAT)

    inventory, floor = write_inventory()
    site = REPO / "site.yml"
    problems: list[str] = []
    print(f"{SCRIPT}: starting {NAME} and provisioning it (site.yml, the sandbox's settings)")
    box = load_sandbox()
    box.start(NAME, IMAGE)
    box.standin_doubles(inventory)
    try:
        first = play(site, inventory, "first")
        print(f"  first converge: {first['seconds']:.1f} s, changed={first['changed']}")
        times: dict[str, list[float]] = {"floor": [], "noop": []}
        for pair in range(args.pairs):
            order = ("floor", "noop") if pair % 2 == 0 else ("noop", "floor")
            for kind in order:
                result = play(floor if kind == "floor" else site, inventory, f"{kind}-{pair + 1}")
                times[kind].append(result["seconds"])
                note = ""
                if kind == "noop":
                    note = f"  ok={result['ok']} changed={result['changed']}"
                    if result["changed"]:
                        problems.append(f"no-op run {pair + 1} changed {result['changed']} task(s)")
                print(f"  pair {pair + 1} {kind:5s} {result['seconds']:6.2f} s{note}")

        # Drift detection intact: a hand edit to the server unit is found and put back.
        sh("docker", "exec", NAME, "sh", "-c", f"echo '{DRIFT_MARK}' >> {UNIT}")
        fixed = play(site, inventory, "drift")
        still = DRIFT_MARK in sh("docker", "exec", NAME, "cat", UNIT, check=False)
        print(f"  after a hand edit of {UNIT}: changed={fixed['changed']}, edit gone: {not still}")
        if not fixed["changed"] or still:
            problems.append(f"the hand edit of {UNIT} was not found and put back")
        again = play(site, inventory, "after-drift")
        if again["changed"]:
            problems.append(f"the converge after the repair changed {again['changed']} task(s)")
    finally:
        if not args.keep:
            sh("docker", "rm", "-f", NAME, check=False)

    floor_s = statistics.median(times["floor"])
    noop_s = statistics.median(times["noop"])
    ratio = noop_s / floor_s
    print()
    print(f"floor (one task)      median {floor_s:6.2f} s  {[round(t, 2) for t in times['floor']]}")
    print(f"no-op site.yml        median {noop_s:6.2f} s  {[round(t, 2) for t in times['noop']]}")
    print(f"noop / floor          {ratio:.1f}x (target <= {TARGET:g}x)")
    print(f"per-task times of each run: {WORK.relative_to(REPO)}/<run>.log (profile_tasks)")
    for problem in problems:
        print(f"FAIL: {problem}")
    return 0 if ratio <= TARGET and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
