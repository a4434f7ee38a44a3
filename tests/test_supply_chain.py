"""Supply chain (issue 15 item 16): uv from a hashed requirement, binary only, https only; the
CUDA repository over https:// unless the test-only switch is on; the keyring pins' shape.
The keyring check itself: tests/test_keyring.py; in the nvidia scenario: test_6."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_validate import (
    load_role_constraints,
    load_role_specs,
    validate,
)

ROOT = Path(__file__).resolve().parents[1]


def _load(path):
    return yaml.safe_load(Path(path).read_text())


SPECS = load_role_specs(str(ROOT / "roles"), _load)
CONSTRAINTS = load_role_constraints(str(ROOT / "roles"), _load)
DEFAULTS = _load(ROOT / "roles/python_env/defaults/main.yml")


def errors_for(values):
    errors = validate(SPECS, CONSTRAINTS, values)[0]
    return [e for e in errors if "not set; allowed: required" not in e]


# ---------------------------------------------------------------- CUDA repository sources


@pytest.mark.parametrize(
    "url",
    ["http://developer.download.nvidia.com/compute/cuda/repos", "file:///srv/nvidia-standin"],
)
def test_insecure_repository_urls_are_refused(url):
    [error] = errors_for({"cuda_repo_base_url": url})
    assert error.startswith(f"cuda_repo_base_url: got '{url}'; allowed: a https:// URL")
    assert "cuda_repo_allow_insecure_sources_for_tests: true" in error
    assert "rule cuda_repo_secure_source" in error


@pytest.mark.parametrize(
    "url",
    ["http://developer.download.nvidia.com/compute/cuda/repos", "file:///srv/nvidia-standin"],
)
def test_the_test_only_switch_allows_them(url):
    values = {"cuda_repo_base_url": url, "cuda_repo_allow_insecure_sources_for_tests": True}
    assert errors_for(values) == []


def test_https_passes_and_is_the_default():
    assert errors_for({"cuda_repo_base_url": "https://mirror.example.invalid/cuda/repos"}) == []
    defaults = _load(ROOT / "roles/cuda_repo/defaults/main.yml")
    assert defaults["cuda_repo_base_url"].startswith("https://")
    assert defaults["cuda_repo_allow_insecure_sources_for_tests"] is False


def test_keyring_pins_shape():
    good = {"debian12/x86_64": "a" * 64, "ubuntu2404/sbsa": "B" * 64}
    assert errors_for({"cuda_repo_keyring_sha256": good}) == []
    [error] = errors_for({"cuda_repo_keyring_sha256": {"debian12/x86_64": "abc"}})
    assert "'debian12/x86_64' a sha256 (64 hex digits)" in error
    [error] = errors_for({"cuda_repo_keyring_sha256": {"debian12": "a" * 64}})
    assert "key 'debian12' is not allowed" in error
    [error] = errors_for({"cuda_repo_keyring_fingerprints": ["3bf863cc"]})
    assert "an OpenPGP key fingerprint" in error
    spaced = "EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC".replace("  ", " ")
    assert errors_for({"cuda_repo_keyring_fingerprints": [spaced]}) == []
    # The key check is always on: no list of allowed keys is no way to switch it off.
    [error] = errors_for({"cuda_repo_keyring_fingerprints": []})
    assert error.startswith("cuda_repo_keyring_fingerprints:")


def test_default_fingerprints_are_nvidias_cuda_keys():
    # NVIDIA names the keys of its Debian/Ubuntu CUDA repositories by short id: 3bf863cc, and
    # 8793F200 for the Debian 13 repository (role cuda_repo's defaults cite where).
    defaults = _load(ROOT / "roles/cuda_repo/defaults/main.yml")
    fprs = defaults["cuda_repo_keyring_fingerprints"]
    assert [f[-8:].lower() for f in fprs] == ["3bf863cc", "8793f200"]
    assert all(len(f) == 40 and f == f.upper() for f in fprs)
    # No sha256 is shipped: a first install has none to compare with (it warns instead).
    assert defaults["cuda_repo_keyring_sha256"] == {}


def test_the_stand_in_scenario_uses_the_switch_and_pins():
    play = _load(ROOT / "molecule/nvidia/converge.yml")[0]["vars"]
    assert play["cuda_repo_base_url"].startswith("file://")
    assert play["cuda_repo_allow_insecure_sources_for_tests"] is True
    assert "pins.json" in play["_standin_pins"]
    # The metrics scenario installs the DCGM exporter from the same stand-in repository.
    metrics = _load(ROOT / "molecule/metrics/host_vars/gpuhost-metrics-deb12.yml")
    assert metrics["cuda_repo_base_url"].startswith("file://")
    assert metrics["cuda_repo_allow_insecure_sources_for_tests"] is True
    assert "pins.json" in metrics["_metrics_standin_pins"]
    assert "fingerprints" in metrics["cuda_repo_keyring_fingerprints"]


# ---------------------------------------------------------------- uv


def test_python_index_is_https_only():
    [error] = errors_for({"python_env_index_url": "http://mirror.example.invalid/simple"})
    assert error.startswith("python_env_index_url: got 'http://mirror.example.invalid/simple'")
    assert errors_for({"python_env_index_url": "https://mirror.example.invalid/simple"}) == []


def test_uv_requirement_pins_the_version_with_hashes():
    version = DEFAULTS["python_env_uv_version"]
    assert DEFAULTS["python_env_uv_requirements"] == (
        "{{ python_env_locks_dir }}/uv-{{ python_env_uv_version }}.txt"
    )
    lock = (ROOT / f"locks/uv-{version}.txt").read_text()
    pins = re.findall(r"(?m)^([A-Za-z0-9_.-]+)==(\S+)", lock)
    assert pins == [("uv", version)]  # uv has no dependencies: nothing else is installed
    hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", lock)
    assert len(hashes) >= 10  # one per platform's wheel (x86_64, aarch64, ...) and the sdist
    assert (ROOT / f"locks/uv-{version}.in").read_text().count(f"uv=={version}") == 1
    makefile = (ROOT / "Makefile").read_text()
    assert f"UV_VERSION := {version}" in makefile
    assert (
        "--require-hashes --only-binary :all: --no-deps -r locks/uv-$(UV_VERSION).txt" in makefile
    )


def test_uv_is_installed_hashed_binary_only_and_without_host_pip_config():
    tasks = _load(ROOT / "roles/python_env/tasks/uv.yml")
    block = next(t for t in tasks if "block" in t)["block"]
    install = next(t for t in block if "--requirement" in str(t.get("ansible.builtin.command")))
    argv = install["ansible.builtin.command"]["argv"]
    for flag in ("--require-hashes", "--no-deps", "--no-input"):
        assert flag in argv
    assert argv[argv.index("--only-binary") + 1] == ":all:"
    assert argv[argv.index("--requirement") + 1] == "{{ _python_env_uv_requirements_copy }}"
    assert not [a for a in argv if a.startswith("uv==")]
    assert install["environment"] == {"PIP_CONFIG_FILE": "/dev/null"}
