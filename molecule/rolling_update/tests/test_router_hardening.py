"""The router unit is hardened as the server's is, and a router beyond loopback needs the
client key (issue 15 item 19). The router here is the real smg (the role's default package):
that it serves the rolling update's load (test_rolling_update.py) under this unit is the proof
the hardening leaves it working; these tests measure the unit and try the open router without
a key."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import testinfra

ROUTER = "gpuhost-rolling_update-router"
SERVICE = "sglang-router"
UNIT = f"/etc/systemd/system/{SERVICE}.service"
REPO = Path(__file__).resolve().parents[3]
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", "")

pytestmark = pytest.mark.skipif(not INVENTORY, reason="runs under molecule verify")


@pytest.fixture(scope="module")
def router():
    return testinfra.get_host(f"docker://{ROUTER}")


def test_router_unit_exposure_is_at_most_2(router):
    out = router.check_output(f"systemd-analyze security {SERVICE}.service --no-pager")
    score = float(re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out).group(1))
    print(f"systemd-analyze security {SERVICE}.service: {score}")
    assert score <= 2.0


def test_router_unit_verifies_and_runs_without_devices(router):
    result = router.run(f"systemd-analyze verify {UNIT}")
    assert result.rc == 0 and result.stderr.strip() == "", result.stderr
    unit = router.file(UNIT).content_string
    assert "PrivateDevices=yes" in unit and "MemoryDenyWriteExecute=yes" in unit
    assert router.service(SERVICE).is_running


def test_open_router_without_the_client_key_is_refused_before_any_change(router):
    before = router.file(UNIT).sha256sum
    extra = {
        "sglang_router_host": "0.0.0.0",
        "sglang_router_admin_api_key": "gpuhost-test-routerkey-3c1f9a",
        "sglang_router_worker_api_key": "",
    }
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    proc = subprocess.run(
        [
            "ansible-playbook", "-i", INVENTORY, str(REPO / "playbooks" / "router.yml"),
            "--limit", ROUTER, "-e", json.dumps(extra),
        ],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    out = " ".join((proc.stdout + proc.stderr).replace("\\n", " ").split())
    assert proc.returncode != 0
    assert "sglang_router_worker_api_key: got ''" in out, out[-3000:]
    assert "open_router_needs_client_key" in out
    assert router.file(UNIT).sha256sum == before
    assert "--host 127.0.0.1" in router.file(UNIT).content_string
