"""Issue 15 items 1 and 12, the parts that run without a host.

Item 1: nothing root copies back lies where the server can write. The server unit's only
writable state is gpuhost_service_state_dir, never gpuhost_state_dir (where root keeps the
known-good configs), and the two settings cannot be the same directory.
Item 12: the GPU device nodes are made and checked by a root oneshot the server requires; its
script names every node that is missing or is not a character device.
The scripted attacks on a real systemd are in molecule/sglang_server/tests/
test_state_and_devices.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_validate import (
    load_role_constraints,
    load_role_specs,
    validate,
)
from gpuhost_fakes import ROOT, template_env

SCRIPT = ROOT / "roles" / "sglang_server" / "files" / "gpuhost-nvidia-devices"
TEMPLATES = ROOT / "roles" / "sglang_server" / "templates"
SHARED = yaml.safe_load((ROOT / "group_vars" / "all" / "gpuhost.yml").read_text())


def _load(path):
    return yaml.safe_load(Path(path).read_text())


# ------------------------------------------------------------------ item 1: the state dirs


def _render(template: str, **overrides) -> str:
    env = template_env()
    values = {
        "ansible_managed": "managed",
        "gpuhost_host": {"init": {"systemd": True, "systemd_version": 252}},
        "gpuhost_sglang": {
            "profile": "glm-5",
            "sglang_version": "0.5.10.post1",
            "served_model_name": "glm-5",
            "model": "zai-org/GLM-5",
            "exec_start": "/opt/gpuhost/libexec/gpuhost-sglang-launch --tp-size 8",
        },
        "_sglang_server_env_path": "/etc/gpuhost/sglang-server.env",
        "_sglang_server_devices_unit": "sglang-server-devices",
        "_sglang_server_devices_script": "/opt/gpuhost/libexec/gpuhost-nvidia-devices",
        "_sglang_server_gpu_count": 8,
        "_sglang_server_keys_path": "/etc/gpuhost/sglang-server.keys",
        "gpuhost_service_user": "gpuhost",
        "gpuhost_service_group": "gpuhost",
        "gpuhost_state_dir": "/var/lib/gpuhost",
        "gpuhost_service_state_dir": "/var/lib/gpuhost/service",
        "gpuhost_cache_dir": "/var/cache/gpuhost",
        "sglang_server_service_name": "sglang-server",
        "sglang_server_timeout_start_sec": 3600,
        "sglang_server_timeout_stop_sec": 600,
        "sglang_server_restart_sec": 10,
        "sglang_server_limit_nofile": 65536,
        **overrides,
    }
    return env.from_string((TEMPLATES / template).read_text()).render(values)


def _directives(unit: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(key + "=")]


def test_server_writes_only_its_own_state_dir():
    unit = _render("sglang-server.service.j2")
    assert _directives(unit, "WorkingDirectory") == ["/var/lib/gpuhost/service"]
    (writable,) = _directives(unit, "ReadWritePaths")
    assert writable.split() == ["/var/cache/gpuhost", "/var/lib/gpuhost/service"]
    # The state dir root reads known-good/previous/pending configs back from is not writable.
    assert "/var/lib/gpuhost" not in writable.split()


@pytest.mark.parametrize(
    ("version", "steps"),
    [(252, False), (254, True), (257, True), ("n/a", False), ("unknown", False)],
)
def test_restart_backoff_only_for_a_systemd_that_knows_it(version, steps):
    """RestartSteps= and RestartMaxDelaySec= came in systemd 254 (systemd.service(5)); the
    version is this run's read of the host (gpuhost_host.init.systemd_version), "n/a" where
    systemd did not boot it and "unknown" where systemctl did not answer."""
    unit = _render("sglang-server.service.j2", gpuhost_host={"init": {"systemd_version": version}})
    assert bool(_directives(unit, "RestartSteps")) is steps
    assert bool(_directives(unit, "RestartMaxDelaySec")) is steps


def test_service_state_dir_is_a_subdirectory_by_default():
    assert SHARED["gpuhost_state_dir"] == "/var/lib/gpuhost"
    assert SHARED["gpuhost_service_state_dir"] == "{{ gpuhost_state_dir }}/service"


def test_service_state_dir_equal_to_the_state_dir_is_refused():
    specs = load_role_specs(str(ROOT / "roles"), _load)
    constraints = load_role_constraints(str(ROOT / "roles"), _load)
    values = {
        "gpuhost_state_dir": "/var/lib/gpuhost",
        "gpuhost_service_state_dir": "/var/lib/gpuhost",
    }
    errors = [
        e for e in validate(specs, constraints, values)[0] if "not set; allowed: required" not in e
    ]
    assert len(errors) == 1, errors
    assert errors[0].startswith("gpuhost_service_state_dir: got '/var/lib/gpuhost'"), errors
    assert "known-good" in errors[0]
    values["gpuhost_service_state_dir"] = "/var/lib/gpuhost/service"
    ok = [
        e for e in validate(specs, constraints, values)[0] if "not set; allowed: required" not in e
    ]
    assert ok == []


# ------------------------------------------------------------------ item 12: device nodes


def test_server_requires_the_device_oneshot_and_has_no_exec_start_pre():
    unit = _render("sglang-server.service.j2")
    assert _directives(unit, "Requires") == ["sglang-server-devices.service"]
    assert "sglang-server-devices.service" in _directives(unit, "After")[0].split()
    assert _directives(unit, "ExecStartPre") == []
    assert "nvidia-modprobe" not in unit


def test_device_oneshot_creates_and_checks_every_gpu_as_root():
    unit = _render("sglang-devices.service.j2")
    assert _directives(unit, "Type") == ["oneshot"]
    assert _directives(unit, "RemainAfterExit") == ["yes"]
    assert _directives(unit, "ExecStart") == [
        "/opt/gpuhost/libexec/gpuhost-nvidia-devices --create /dev 8"
    ]
    assert "User" not in {line.split("=", 1)[0] for line in unit.splitlines()}
    # Hardened for what it does: modules and nodes, no network, nothing else writable.
    caps = _directives(unit, "CapabilityBoundingSet")[0].split()
    assert set(caps) == {
        "CAP_SYS_MODULE",
        "CAP_MKNOD",
        "CAP_CHOWN",
        "CAP_FOWNER",
        "CAP_DAC_OVERRIDE",
    }
    for setting in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateNetwork=yes",
        "ProtectHome=yes",
    ):
        assert setting in unit.splitlines()
    # Nothing that closes the device list (mknod needs `m` on nodes that do not exist yet)
    # or forbids loading the driver.
    keys = {line.split("=", 1)[0] for line in unit.splitlines() if "=" in line}
    for closing in (
        "DeviceAllow",
        "DevicePolicy",
        "PrivateDevices",
        "ProtectClock",
        "ProtectKernelModules",
    ):
        assert closing not in keys, closing
    assert _directives(unit, "ExecStart") == [
        "/opt/gpuhost/libexec/gpuhost-nvidia-devices --create /dev 8"
    ]


def _check(devdir, gpus, *flags):
    return subprocess.run(
        ["sh", str(SCRIPT), *flags, str(devdir), str(gpus)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )


def _char_device(path: Path) -> None:
    # A symbolic link to /dev/null passes `[ -c ]` like a node: no CAP_MKNOD needed here
    # (the scenario makes real nodes with mknod).
    path.symlink_to("/dev/null")


ALL = ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]


def test_every_node_present_passes(tmp_path):
    for name in ALL:
        _char_device(tmp_path / name)
    out = _check(tmp_path, 2)
    assert out.returncode == 0, out.stderr
    assert "all device nodes present" in out.stdout


def test_missing_nodes_are_each_named(tmp_path):
    for name in ("nvidia0", "nvidiactl"):
        _char_device(tmp_path / name)
    out = _check(tmp_path, 2)
    assert out.returncode == 1
    assert (
        f"CUDA cannot start: device nodes missing in {tmp_path}: nvidia1 (absent), "
        "nvidia-uvm (absent), nvidia-uvm-tools (absent)." in out.stderr
    )
    assert "nvidia0 " not in out.stderr and "nvidiactl (" not in out.stderr


def test_a_plain_file_is_not_a_device_node(tmp_path):
    for name in ALL:
        _char_device(tmp_path / name)
    (tmp_path / "nvidia-uvm").unlink()
    (tmp_path / "nvidia-uvm").write_text("")
    out = _check(tmp_path, 2)
    assert out.returncode == 1
    assert "nvidia-uvm (not a character device)" in out.stderr


def test_create_without_nvidia_modprobe_says_so(tmp_path):
    out = _check(tmp_path, 1, "--create")
    assert out.returncode == 1
    if not Path("/usr/bin/nvidia-modprobe").exists():
        assert "/usr/bin/nvidia-modprobe is not installed" in out.stderr
    assert "nvidia0 (absent)" in out.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["/dev"], "usage:"),
        (["/dev", "two"], "GPUS: got 'two'; allowed: a whole number"),
        (["/no/such/dir", "1"], "DEVDIR: got '/no/such/dir'; allowed: an existing directory"),
    ],
)
def test_bad_usage_is_refused(args, says):
    out = subprocess.run(["sh", str(SCRIPT), *args], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and says in out.stderr
