"""The keyring is installed only when it is the pinned file with an allowed key, and the
repository URL is https:// unless the test-only switch is on.

The keyring here is the stand-in's (a TEST DOUBLE of NVIDIA's cuda-keyring, built by
../standin_repo.py with a throwaway key); converge.yml pins its sha256 and fingerprint from
the pins.json the build writes, the way an inventory pins NVIDIA's."""

import subprocess

import pytest
from conftest import inventory_hosts, run_playbook

WRONG = "0" * 64


def installed(name: str) -> str:
    return subprocess.run(
        ["docker", "exec", name, "dpkg-query", "-W", "-f=${db:Status-Status}", "cuda-keyring"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


def failure(out: dict, name: str) -> str:
    for play in out.get("plays", []):
        for task in play.get("tasks", []):
            result = task["hosts"].get(name) or {}
            if result.get("failed"):
                return task["task"]["name"] + ": " + str(result.get("msg", ""))
    return ""


@pytest.fixture(scope="module")
def runs():
    names = inventory_hosts()
    # The release test_5 left installed: only the keyring moves in these runs.
    base = {"nvidia_driver_branch": 580, "nvidia_driver_version": "580.95.05"}
    # 1. file:// without the test-only switch: refused by validation, before any change.
    insecure = run_playbook({**base, "cuda_repo_allow_insecure_sources_for_tests": False})
    # 2. The keyring is gone and the pin does not match the file: nothing is installed.
    for name in names:
        subprocess.run(["docker", "exec", name, "dpkg", "--purge", "cuda-keyring"], check=True)
    pins = {f"debian{n}/x86_64": WRONG for n in (12, 13)}
    tampered = run_playbook({**base, "cuda_repo_keyring_sha256": pins})
    after_tampered = {name: installed(name) for name in names}
    # 3. The scenario's own pins again: the keyring is checked and installed.
    restored = run_playbook(base)
    return insecure, tampered, after_tampered, restored, {n: installed(n) for n in names}


def test_file_url_needs_the_test_only_switch(host, runs):
    insecure = runs[0]
    name = host.backend.get_hostname()
    assert insecure["rc"] != 0
    message = failure(insecure, name)
    assert "cuda_repo_base_url: got 'file:///srv/nvidia-standin'" in message
    assert "allowed: a https:// URL (cuda_repo_allow_insecure_sources_for_tests" in message
    assert insecure["stats"][name]["changed"] == 0


def test_a_keyring_that_is_not_the_pinned_one_is_not_installed(host, runs):
    tampered, after = runs[1], runs[2]
    name = host.backend.get_hostname()
    assert tampered["rc"] != 0
    message = failure(tampered, name)
    assert "Check its sha256 and key fingerprints before installing it" in message
    assert "is not the one pinned in cuda_repo_keyring_sha256" in message
    assert "Nothing was installed" in message
    assert after[name] != "installed"


def test_the_pinned_keyring_is_installed(host, runs):
    restored, after = runs[3], runs[4]
    name = host.backend.get_hostname()
    assert restored["rc"] == 0, restored["stats"]
    assert after[name] == "installed"
