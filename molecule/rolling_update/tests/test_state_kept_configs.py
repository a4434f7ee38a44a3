"""Issue 15 item 1 in the rolling_update scenario, after test_rolling_update.py (file order):
the configs `gpuhost rollback` restores (rolling_update/previous, and pending during an
update) are root's, in a state dir the service account cannot write; as that account, a
scripted attack to rename, read or plant them fails with "Permission denied"."""

from __future__ import annotations

import os
import subprocess

import pytest

WORKERS = [f"gpuhost-rolling_update-w{i}" for i in (1, 2, 3)]
STATE = "/var/lib/gpuhost"
KEPT = f"{STATE}/rolling_update"

pytestmark = pytest.mark.skipif(
    not os.environ.get("MOLECULE_INVENTORY_FILE"), reason="runs under molecule verify"
)


def sh(name: str, script: str, user: str = "") -> subprocess.CompletedProcess:
    wrap = ["setpriv", "--reuid=gpuhost", "--regid=gpuhost", "--init-groups"] if user else []
    return subprocess.run(
        ["docker", "exec", name, *wrap, "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
    )


def test_kept_configs_are_roots_in_a_root_state_dir():
    for name in WORKERS:
        out = sh(name, f"stat -c '%n %U %G %a' {STATE} {KEPT} {KEPT}/previous {STATE}/service")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split("\n")[:4] == [
            f"{STATE} root gpuhost 750",
            f"{KEPT} root root 700",
            f"{KEPT}/previous root root 700",
            f"{STATE}/service gpuhost gpuhost 750",
        ], name


@pytest.mark.parametrize(
    "attack",
    [
        f"mv {KEPT} {STATE}/rolling_update.old",
        f"mkdir {STATE}/rolling_update.planted",
        f"ls {KEPT}/previous",
        f"mkdir -p {KEPT}/pending/x",
        f"cp /etc/hostname {KEPT}/previous/unit",
    ],
)
def test_service_account_cannot_touch_the_kept_configs(attack):
    for name in WORKERS:
        before = sh(name, f"sha256sum {KEPT}/previous/unit {KEPT}/previous/env").stdout
        out = sh(name, attack, user="gpuhost")
        assert out.returncode != 0 and "Permission denied" in out.stderr, (name, out.stderr)
        assert sh(name, f"sha256sum {KEPT}/previous/unit {KEPT}/previous/env").stdout == before
