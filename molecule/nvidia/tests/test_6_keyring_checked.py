"""The keyring is installed only when every key it carries is an allowed one and, where a
sha256 is pinned for the repository directory, it is the pinned file; with no pin it is
installed with a warning naming cuda_repo_keyring_sha256. The repository URL is https://
unless the test-only switch is on.

The keyring here is the stand-in's (a TEST DOUBLE of NVIDIA's cuda-keyring, built by
../standin_repo.py with a throwaway key); converge.yml pins its sha256 and fingerprint from
the pins.json the build writes, the way an inventory pins NVIDIA's (converge itself is the
pinned path: it installs the keyring through the same check)."""

import subprocess

import pytest
import yaml
from conftest import PROJECT, inventory_hosts, run_playbook, task_results

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


def keyring_check(out: dict, name: str) -> dict:
    return task_results(out, "Check its key fingerprints and sha256 before installing it").get(
        name, {}
    )


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
    # 3. No sha256 pinned, and the allowed keys are the role's defaults (NVIDIA's): the
    # stand-in's throwaway key is not among them, so the package is refused all the same.
    nvidia_keys = yaml.safe_load((PROJECT / "roles/cuda_repo/defaults/main.yml").read_text())[
        "cuda_repo_keyring_fingerprints"
    ]
    foreign = run_playbook(
        {**base, "cuda_repo_keyring_sha256": {}, "cuda_repo_keyring_fingerprints": nvidia_keys}
    )
    after_foreign = {name: installed(name) for name in names}
    # 4. No sha256 pinned, the scenario's allowed key: installed, with a warning.
    unpinned = run_playbook({**base, "cuda_repo_keyring_sha256": {}})
    return {
        "insecure": insecure,
        "tampered": (tampered, after_tampered),
        "foreign": (foreign, after_foreign),
        "unpinned": (unpinned, {n: installed(n) for n in names}),
    }


def test_file_url_needs_the_test_only_switch(host, runs):
    insecure = runs["insecure"]
    name = host.backend.get_hostname()
    assert insecure["rc"] != 0
    message = failure(insecure, name)
    assert "cuda_repo_base_url: got 'file:///srv/nvidia-standin'" in message
    assert "allowed: a https:// URL (cuda_repo_allow_insecure_sources_for_tests" in message
    assert insecure["stats"][name]["changed"] == 0


def test_a_keyring_that_is_not_the_pinned_one_is_not_installed(host, runs):
    tampered, after = runs["tampered"]
    name = host.backend.get_hostname()
    assert tampered["rc"] != 0
    message = failure(tampered, name)
    assert "Check its key fingerprints and sha256 before installing it" in message
    assert "is not the one pinned in cuda_repo_keyring_sha256" in message
    assert "Nothing was installed" in message
    assert after[name] != "installed"


def test_without_a_pin_a_key_that_is_not_allowed_is_still_refused(host, runs):
    foreign, after = runs["foreign"]
    name = host.backend.get_hostname()
    assert foreign["rc"] != 0
    message = failure(foreign, name)
    assert "Check its key fingerprints and sha256 before installing it" in message
    assert "which cuda_repo_keyring_fingerprints does not list" in message
    assert after[name] != "installed"


def test_without_a_pin_the_keyring_is_installed_with_a_warning(host, runs):
    unpinned, after = runs["unpinned"]
    name = host.backend.get_hostname()
    assert unpinned["rc"] == 0, unpinned["stats"]
    assert after[name] == "installed"
    result = keyring_check(unpinned, name)
    assert result["sha256_checked"] is False
    [warning] = result["warnings"]
    assert warning.startswith("cuda_repo_keyring_sha256 has no sha256 for 'debian")
    assert result["sha256"] in warning
