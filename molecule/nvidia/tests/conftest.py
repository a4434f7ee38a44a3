"""Helpers for the nvidia scenario's tests.

The repository the roles install from is a STAND-IN for NVIDIA's CUDA repository (a test
double built by ../standin_repo.py, see ../README.md): packages under NVIDIA's real names and
versions that contain no driver. The side tests re-run ../converge.yml with overrides, the
way a user changes group_vars and runs the playbook again.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = SCENARIO.parents[1]
# The stand-in driver packages (names of NVIDIA's Debian packages).
FAMILY = ("nvidia-open", "nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-persistenced")


def inventory_hosts() -> list[str]:
    inventory = yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())
    names: set[str] = set()

    def walk(group: dict) -> None:
        names.update((group or {}).get("hosts") or {})
        for child in ((group or {}).get("children") or {}).values():
            walk(child)

    for group in inventory.values():
        walk(group)
    return sorted(names)


def run_playbook(extra_vars: dict, check: bool = False, playbook: str = "converge.yml") -> dict:
    """Run a scenario playbook against the containers; return the json callback's output."""
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(PROJECT / "roles"),
        "ANSIBLE_COLLECTIONS_PATH": str(PROJECT / ".collections"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        # Not empty (ansible-core rejects that) and nothing that prints beside the JSON.
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json",
        "ANSIBLE_PIPELINING": "true",
        "ANSIBLE_HOST_KEY_CHECKING": "false",
    }
    args = [
        "ansible-playbook",
        "-i",
        os.environ["MOLECULE_INVENTORY_FILE"],
        str(SCENARIO / playbook),
        "-e",
        json.dumps(extra_vars),
    ]
    if check:
        args.append("--check")
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"no JSON from ansible-playbook: {proc.stdout}{proc.stderr}") from exc
    out["rc"] = proc.returncode
    return out


def task_results(out: dict, name: str) -> dict[str, dict]:
    """Per-host results of the last task whose name ends with `name` (roles prefix it)."""
    found: dict[str, dict] = {}
    for play in out.get("plays", []):
        for task in play.get("tasks", []):
            if task["task"]["name"].endswith(name):
                found = task["hosts"]
    return found


def started(names: list[str]) -> dict[str, str]:
    """When each container's PID 1 started: a reboot would change it."""
    return {
        name: subprocess.run(
            ["docker", "inspect", "-f", "{{.State.StartedAt}} {{.State.Running}}", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for name in names
    }


def versions(host) -> dict[str, str]:
    return {name: host.package(name).version for name in FAMILY}


def snapshot(names: list[str]) -> dict[str, dict]:
    """Driver versions, holds and pin of each container, taken right after a run (tests are
    parametrized per host, so by the time a test runs later runs may have moved things)."""
    taken = {}
    for name in names:

        def sh(command: str, name: str = name) -> str:
            return subprocess.run(
                ["docker", "exec", name, "sh", "-c", command],
                capture_output=True,
                text=True,
                check=True,
            ).stdout

        taken[name] = {
            "versions": dict(
                line.split("\t")
                for line in sh(
                    f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\n' {' '.join(FAMILY)}"
                )
                .strip()
                .splitlines()
            ),
            "held": set(sh("apt-mark showhold").split()),
            "pin": sh("cat /etc/apt/preferences.d/gpuhost-nvidia-driver.pref"),
        }
    return taken
