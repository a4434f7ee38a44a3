"""Issue 15 items 1 and 12 on a real systemd, after test_sglang_server.py (file order).

Item 1, a scripted attack: the service account tries to plant, replace and rename the
known-good and rollback configs root copies into /etc; every try fails with "Permission
denied", the same rename succeeds on the layout before the fix (state dir owned by the
service account), and a failed gate restores the real known-good config, nothing the service
wrote. Item 12: the server requires the root oneshot that makes and checks the GPU device
nodes; its script names each missing node; a failing check stops the server's start and the
run's failure message names the missing nodes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from test_sglang_server import converge, healthy

SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", Path(__file__).resolve().parents[1]))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", "")
SERVICE = "sglang-server"
DEVICES = f"{SERVICE}-devices"
UNIT = f"/etc/systemd/system/{SERVICE}.service"
ENV_FILE = f"/etc/gpuhost/{SERVICE}.env"
STATE = "/var/lib/gpuhost"
OWN = f"{STATE}/service"
KNOWN_GOOD = f"{STATE}/sglang_server/known-good"
SCRIPT = "/opt/gpuhost/libexec/gpuhost-nvidia-devices"
API_KEY = "gpuhost-test-apikey-5f0c1d2e3b4a"
SERVED = "glm-5"
MARK = "PLANTED-BY-THE-SERVICE-ACCOUNT"

pytestmark = pytest.mark.skipif(not INVENTORY, reason="runs under molecule verify")


def as_service(host, script: str):
    """A shell command as the service account (its uid, gid and groups; no privileges)."""
    return host.run(
        "setpriv --reuid=gpuhost --regid=gpuhost --init-groups --inh-caps=-all "
        f"sh -c {_quote(script)}"
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --- item 1: the state dirs ---------------------------------------------------------------------


def test_state_dir_is_roots_and_the_service_has_its_own(host):
    state, own = host.file(STATE), host.file(OWN)
    assert (state.user, state.group, state.mode) == ("root", "gpuhost", 0o750)
    assert (own.user, own.group, own.mode) == ("gpuhost", "gpuhost", 0o750)
    assert host.user("gpuhost").home == OWN
    unit = host.file(UNIT).content_string
    assert f"WorkingDirectory={OWN}" in unit.splitlines()
    assert f"ReadWritePaths=/var/cache/gpuhost {OWN}" in unit.splitlines()
    assert host.file(KNOWN_GOOD).user == "root" and host.file(KNOWN_GOOD).mode == 0o700


ATTACKS = {
    "rename the known-good tree aside": f"mv {STATE}/sglang_server {STATE}/sglang_server.old",
    "rename the rollback tree aside": f"mv {STATE}/rolling_update {STATE}/x",
    "plant a directory of its own": f"mkdir {STATE}/rolling_update-planted",
    "plant a file in the state dir": f"echo {MARK} > {STATE}/nccl-autotune.json",
    "replace the known-good unit": f"cp {OWN}/unit {KNOWN_GOOD}/unit",
    "link the known-good unit to its own file": f"ln -sf {OWN}/unit {KNOWN_GOOD}/unit",
    "plant a pending config": f"mkdir -p {STATE}/rolling_update/pending",
    "move its own dir over the known-good tree": f"mv -T {OWN}/fake {STATE}/sglang_server",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_service_cannot_plant_or_rename_what_root_copies_back(host, attack):
    # The service account's own files: a unit that would run anything, and a fake tree.
    prep = as_service(
        host,
        f"printf '[Service]\\nExecStart=/bin/sh -c {MARK}\\n' > {OWN}/unit && "
        f"mkdir -p {OWN}/fake/known-good && cp {OWN}/unit {OWN}/fake/known-good/unit",
    )
    assert prep.rc == 0, prep.stderr
    # What rolling_update keeps, made as that role makes it (root, 0700).
    host.run(f"install -d -o root -g root -m 0700 {STATE}/rolling_update")
    before = host.check_output(f"ls -la --time-style=+ {STATE} {STATE}/sglang_server {KNOWN_GOOD}")
    tried = as_service(host, ATTACKS[attack])
    assert tried.rc != 0
    assert "Permission denied" in tried.stderr, tried.stderr
    assert (
        host.check_output(f"ls -la --time-style=+ {STATE} {STATE}/sglang_server {KNOWN_GOOD}")
        == before
    )
    assert MARK not in host.check_output(f"cat {KNOWN_GOOD}/unit")


def test_the_rename_worked_on_the_layout_before_the_fix(host):
    """The same attack against a state dir the service account owns (the old layout) succeeds:
    the tests above fail without the fix."""
    host.run(f"chown gpuhost {STATE}")
    try:
        tried = as_service(host, f"mv {STATE}/sglang_server {STATE}/sglang_server.old")
        assert tried.rc == 0, tried.stderr
        assert host.file(f"{STATE}/sglang_server.old/known-good").is_directory
    finally:
        old = f"{STATE}/sglang_server.old"
        host.run(f"[ -d {old} ] && mv {old} {STATE}/sglang_server")
        host.run(f"chown root {STATE}")
    assert host.file(KNOWN_GOOD).is_directory and host.file(STATE).user == "root"


def test_the_old_layout_is_refused_before_any_change(host):
    """A host left in the old layout (the service account owns the state dir) is not served
    until the host stage took the state dir back: the run stops before touching the server."""
    unit = host.file(UNIT).sha256sum
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    host.run(f"chown gpuhost {STATE}")
    try:
        proc = converge({"sglang_server_flags": {"--max-running-requests": 8}})
    finally:
        host.run(f"chown root {STATE}")
    assert proc.rc != 0
    assert proc.said(f"gpuhost_state_dir {STATE} must be a directory owned by root")
    assert proc.said("Run the host stage first")
    assert host.file(UNIT).sha256sum == unit
    assert host.check_output(f"systemctl show -p MainPID --value {SERVICE}") == pid


def test_a_failed_gate_restores_nothing_the_service_wrote(host):
    kept = host.file(f"{KNOWN_GOOD}/unit").sha256sum
    live = host.file(UNIT).sha256sum
    assert live == kept
    proc = converge(
        {
            "sglang_server_flags": {"--max-running-requests": 32},
            "sglang_server_extra_env": {"SGLANG_STANDIN_FAULT": "crash-on-start"},
        }
    )
    assert proc.rc != 0
    assert proc.said(
        "Rolled back to the known-good unit and env; the previous server is healthy again"
    )
    assert host.file(UNIT).sha256sum == kept
    assert MARK not in host.file(UNIT).content_string
    assert host.file(f"{OWN}/unit").contains(MARK)  # still only in the service's own dir
    assert healthy(host)


# --- item 12: the GPU device nodes --------------------------------------------------------------


# --- issue 28 item 1: root never follows what the service account planted ------------------
# The completion-marker directory lies in HF_HOME, which the service account writes: it
# replaces it with a link to /etc/systemd/system (root would have chowned the target to it,
# a root shell on the next restart) or with a FIFO. The run refuses, naming the path, before
# any change; the target keeps root's owner and mode.
MARKERS = "/var/cache/gpuhost/huggingface/gpuhost-complete"
PLANTS = {
    "link": (f"ln -s /etc/systemd/system {MARKERS}", "a symbolic link to /etc/systemd/system"),
    "fifo": (f"mkfifo {MARKERS}", "a FIFO"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_root_refuses_what_the_service_planted_on_its_path(host, plant):
    command, found = PLANTS[plant]
    target = "stat -c '%U:%G %a' /etc/systemd/system"
    before, pid = host.check_output(target), host.service(SERVICE).systemd_properties["MainPID"]
    assert before == "root:root 755"
    planted = as_service(host, f"mv {MARKERS} {MARKERS}.kept && {command}")
    assert planted.rc == 0, planted.stderr
    try:
        proc = converge()
        assert proc.rc != 0
        assert proc.said(f"{MARKERS} is {found}"), proc.out[-3000:]
        assert proc.said("root does not follow or change it")
        assert host.check_output(target) == before
        assert host.service(SERVICE).systemd_properties["MainPID"] == pid
    finally:
        undo = as_service(host, f"rm -f {MARKERS} && mv {MARKERS}.kept {MARKERS}")
        assert undo.rc == 0, undo.stderr


def _show(host, unit: str, prop: str) -> str:
    return host.check_output(f"systemctl show -p {prop} --value {unit}")


def test_server_requires_the_device_oneshot(host):
    assert f"{DEVICES}.service" in _show(host, f"{SERVICE}.service", "Requires").split()
    assert f"{DEVICES}.service" in _show(host, f"{SERVICE}.service", "After").split()
    assert "ExecStartPre" not in host.file(UNIT).content_string
    assert _show(host, f"{DEVICES}.service", "Type") == "oneshot"
    assert _show(host, f"{DEVICES}.service", "ActiveState") == "active"
    assert _show(host, f"{DEVICES}.service", "RemainAfterExit") == "yes"
    assert host.run(f"systemd-analyze verify /etc/systemd/system/{DEVICES}.service").rc == 0
    # The real path: the nodes prepare made (as the driver would) are checked in /dev.
    journal = host.check_output(f"journalctl -u {DEVICES} --no-pager -n 20")
    assert "all device nodes present in /dev: nvidia0..nvidia7" in journal, journal
    out = host.check_output(f"systemd-analyze security {DEVICES}.service --no-pager")
    print(out.splitlines()[-1])
    server = host.check_output(f"systemd-analyze security {SERVICE}.service --no-pager")
    score = float(re.search(r"Overall exposure level for \S+: (\d+\.\d+)", server).group(1))
    print(f"systemd-analyze security {SERVICE}.service: {score}")


def test_check_script_names_missing_and_fake_nodes(host):
    d = "/run/gpuhost-devtest"
    host.run(f"rm -rf {d}; mkdir -p {d}")
    try:
        missing = host.run(f"{SCRIPT} {d} 2")
        assert missing.rc == 1
        assert (
            f"device nodes missing in {d}: nvidia0 (absent), nvidia1 (absent), nvidiactl (absent), "
            "nvidia-uvm (absent), nvidia-uvm-tools (absent)." in missing.stderr
        )
        # Plain files are not device nodes.
        host.run(f"touch {d}/nvidia0 {d}/nvidia1 {d}/nvidiactl {d}/nvidia-uvm {d}/nvidia-uvm-tools")
        fake = host.run(f"{SCRIPT} {d} 2")
        assert fake.rc == 1 and "nvidia-uvm (not a character device)" in fake.stderr
        # Real character devices (the NVIDIA major, 195; UVM's is dynamic) pass.
        host.run(f"rm -f {d}/*")
        made = host.run(
            f"mknod {d}/nvidia0 c 195 0 && mknod {d}/nvidia1 c 195 1 "
            f"&& mknod {d}/nvidiactl c 195 255 "
            f"&& mknod {d}/nvidia-uvm c 511 0 && mknod {d}/nvidia-uvm-tools c 511 1"
        )
        assert made.rc == 0, made.stderr
        assert host.run(f"{SCRIPT} {d} 2").rc == 0
        three = host.run(f"{SCRIPT} {d} 3")
        assert three.rc == 1 and f"missing in {d}: nvidia2 (absent)." in three.stderr
    finally:
        host.run(f"rm -rf {d}")


DROPIN = f"/etc/systemd/system/{DEVICES}.service.d/test.conf"
FAKE_DEV = "/dev/gpuhost-test-dev"


def test_missing_nodes_stop_the_start_and_the_run_names_them(host):
    """The real oneshot, hardening and all, checks a device dir where two nodes were made
    with mknod inside the unit (CAP_MKNOD, the syscall filter and ProtectSystem allow it) and
    UVM is missing: the server cannot start, and the run's failure names what is missing."""
    dropin = (
        "[Service]\n"
        f"ExecStartPre=/bin/sh -c 'rm -rf {FAKE_DEV}; mkdir -p {FAKE_DEV} && "
        f"mknod {FAKE_DEV}/nvidia0 c 195 0 && mknod {FAKE_DEV}/nvidiactl c 195 255'\n"
        "ExecStart=\n"
        f"ExecStart={SCRIPT} --create {FAKE_DEV} 1\n"
    )
    host.run(
        f"mkdir -p {Path(DROPIN).parent} && printf %s {_quote(dropin)} > {DROPIN} "
        "&& systemctl daemon-reload"
    )
    try:
        proc = converge({"sglang_server_flags": {"--max-running-requests": 24}})
        print(proc.out[-6000:])
        assert proc.rc != 0
        assert proc.said(
            f"CUDA cannot start: device nodes missing in {FAKE_DEV}: "
            "nvidia-uvm (absent), nvidia-uvm-tools (absent)."
        )
        assert not host.service(SERVICE).is_running
        assert host.run(f"test -c {FAKE_DEV}/nvidia0").rc == 0  # mknod worked in the unit
        journal = host.check_output(f"journalctl -u {DEVICES} --no-pager -n 50")
        assert "nvidia-uvm (absent)" in journal
    finally:
        host.run(f"rm -rf {Path(DROPIN).parent} {FAKE_DEV}; systemctl daemon-reload")
    back = converge()
    assert back.rc == 0, back.out[-3000:]
    assert healthy(host)
    assert _show(host, f"{DEVICES}.service", "ActiveState") == "active"
