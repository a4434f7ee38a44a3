"""Preflight refuses a host whose Python cannot run the pinned stack, before any change
(issue 34): Ubuntu 22.04's Python 3.10 with the 3.11 locks. The rule is role python_env's
(choose_python); preflight applies it through python_fit_finding (module python_env_fit) and
its gate stops on the finding, naming the OS, the version found, what is allowed and the
setting that makes the host fit (python_env_python_source: managed)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_python_env as pe
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import (
    parse_os_release,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_driver_branches import (
    driver_branch_finding,
)
from gpuhost_fakes import run_playbook

ROOT = Path(__file__).resolve().parents[1]
# /etc/os-release of Ubuntu 22.04.5 (jammy), as the host has it.
UBUNTU_2204 = """\
PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=jammy
"""
UBUNTU = parse_os_release(UBUNTU_2204)["pretty_name"]
LOCK = "sglang-0.5.10.post1-cu128.txt"
INSTALL_DIR = "/opt/gpuhost/python"


def finding(source="system", version="3.10.12", lock_python="3.11", os_name=UBUNTU):
    return pe.python_fit_finding(
        source, "/usr/bin/python3", version, lock_python, LOCK, INSTALL_DIR, os_name=os_name
    )


def test_ubuntu_2204_python_310_fails_naming_os_version_and_what_is_allowed():
    got = finding()
    assert (got["check"], got["status"]) == ("python_env.python", "fail")
    message = got["message"]
    assert message.startswith(
        "python_env_python: /usr/bin/python3 is Python 3.10.12 on Ubuntu 22.04.5 LTS, but the "
        f"lock {LOCK} was resolved for Python 3.11"
    )
    assert "allowed: python_env_python_source: managed" in message
    assert "python_env_python pointing at a Python 3.11 interpreter" in message
    assert got["fix"].startswith("set python_env_python_source: managed")
    assert f"uv installs Python 3.11 under {INSTALL_DIR}" in got["fix"]


def test_the_finding_is_role_python_envs_own_decision():
    """One rule: the finding's message is the error role python_env stops on (plus the OS)."""
    for version in ("3.10.12", "3.13.5", ""):
        choice = pe.choose_python("system", "/usr/bin/python3", version, "3.11", LOCK, INSTALL_DIR)
        got = finding(version=version, os_name="")
        assert got["message"] == choice["error"] != ""
        assert got["status"] == "fail"


@pytest.mark.parametrize(
    ("source", "version", "lock_python"),
    [
        ("managed", "3.10.12", "3.11"),  # uv installs the lock's Python: no reason to stop
        ("managed", "", "3.11"),  # nor when the distro's Python does not run at all
        ("system", "3.11.2", "3.11"),  # Debian 12
        ("system", "3.10.12", None),  # a lock of your own that names no Python
    ],
)
def test_hosts_that_fit_pass(source, version, lock_python):
    got = finding(source, version, lock_python)
    assert got["status"] == "pass", got
    assert got["fix"] == ""


def test_a_python_that_does_not_run_fails_naming_the_os():
    got = finding(version="")
    assert got["status"] == "fail"
    assert got["message"].startswith(
        "python_env_python: /usr/bin/python3 does not run on this host (Ubuntu 22.04.5 LTS)"
    )


def test_a_bad_source_fails_naming_the_variable():
    got = finding(source="conda")
    assert got["message"] == "python_env_python_source: got 'conda'; allowed: system, managed"


# ------------------------------------------------------- the preflight role, run for real

PLAY = """\
---
- name: Preflight on a host that says it is Ubuntu 22.04
  hosts: gpu_hosts
  gather_facts: false
  tasks:
    - name: The OS the host's facts name (what gpu_facts reads from /etc/os-release)
      ansible.builtin.set_fact:
        gpuhost_host: {os: %(os)s}
    - name: Preflight's Python check
      ansible.builtin.include_role:
        name: gpuhost.gpu.preflight
        tasks_from: python
    - name: The gate
      ansible.builtin.include_role:
        name: gpuhost.gpu.preflight
        tasks_from: gate
    - name: Nothing after the gate runs on a refused host
      ansible.builtin.debug:
        msg: PAST THE GATE
"""


@pytest.fixture
def play(tmp_path):
    (tmp_path / "group_vars").symlink_to(ROOT / "group_vars")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_hosts:\n      hosts:\n        jammy:\n"
        "          ansible_connection: local\n"
        f"          ansible_python_interpreter: {sys.executable}\n"
    )
    (tmp_path / "play.yml").write_text(PLAY % {"os": parse_os_release(UBUNTU_2204)})
    python = tmp_path / "python3.10"
    python.write_text("#!/bin/sh\necho 3.10.12\n")
    python.chmod(0o755)

    def run(*extra):
        args = ["-i", tmp_path / "hosts.yml", tmp_path / "play.yml", "-e"]
        args += [f"python_env_python={python}", *extra]
        out = run_playbook(args, tmp_path / "facts", timeout=120)
        return out.returncode, out.stdout + out.stderr

    return run


def test_preflight_refuses_ubuntu_2204_before_any_change(play):
    for extra in ([], ["--check"]):
        rc, log = play(*extra)
        assert rc == 2, log
        assert "python_env.python | python_env_python: " in log
        assert "is Python 3.10.12 on Ubuntu 22.04.5 LTS" in log
        assert "allowed: python_env_python_source: managed" in log
        assert "PAST THE GATE" not in log
        assert "changed=0" in log and "failed=1" in log


def test_preflight_refuses_a_python_that_is_not_there(play, tmp_path):
    rc, log = play("-e", f"python_env_python={tmp_path / 'no-python'}")
    assert rc == 2, log
    words = " ".join(log.split())
    assert f"python_env_python: {tmp_path / 'no-python'} does not run on this host (Ubuntu" in words
    assert "PAST THE GATE" not in log


def test_preflight_lets_ubuntu_2204_through_with_a_managed_python(play):
    rc, log = play("-e", "python_env_python_source=managed")
    assert rc == 0, log
    words = " ".join(log.split())
    assert "PASS python_env.python python_env_python_source: managed: uv installs" in words
    assert "PAST THE GATE" in log


def test_preflight_skips_the_check_when_python_env_is_off(play):
    rc, log = play("-e", "python_env_enabled=false")
    assert rc == 0, log
    assert "python_env.python" not in log
    assert "PAST THE GATE" in log


def test_the_whole_preflight_role_runs_the_check(play, tmp_path):
    """Role preflight's main entry (gpu_facts on this machine, then the checks) includes the
    Python check: the OS named is the one gpu_facts read from this machine."""
    (tmp_path / "role.yml").write_text(
        "- name: Preflight role\n  hosts: gpu_hosts\n  gather_facts: false\n"
        "  roles: [gpuhost.gpu.preflight]\n"
    )
    here = parse_os_release(Path("/etc/os-release").read_text())["pretty_name"]
    python = tmp_path / "python3.10"
    out = run_playbook(
        ["-i", tmp_path / "hosts.yml", tmp_path / "role.yml", "-e", f"python_env_python={python}"],
        tmp_path / "facts",
        timeout=120,
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log  # the gate is a task of its own (playbooks/preflight.yml)
    words = " ".join(log.split())  # the YAML callback wraps long lines
    expected = f"FAIL python_env.python python_env_python: {python} is Python 3.10.12 on {here}"
    assert expected in words
    # role nvidia_driver's branch finding (entry point `branch`), for today's date
    today = datetime.now(UTC).date().isoformat()
    branch = driver_branch_finding(580, today, [], "cu128")  # group_vars/all: lane cu128
    assert f"{branch['status'].upper()} nvidia_driver.branch {branch['message']}" in words
    # and the systemd check, against what this machine is (sd_booted(3): /run/systemd/system)
    pid1 = Path("/proc/1/comm").read_text().strip()
    if Path("/run/systemd/system").is_dir():
        assert "PASS preflight.systemd booted with systemd" in words
    else:
        quoted = words.replace("''", "'")  # YAML doubles a quote inside a quoted scalar
        assert f"FAIL preflight.systemd not booted with systemd: PID 1 is {pid1!r}" in quoted
