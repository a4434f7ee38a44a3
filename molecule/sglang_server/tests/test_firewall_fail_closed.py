"""The port rule fails closed (issue 15 item 10), on real systemd and nftables.

Runs in molecule's verify step before test_sglang_server.py (file order) and leaves the
converged config behind. Each test drives ansible-playbook against the container and then
attacks the ports from outside it: this machine reaches the container's address over its
bridge, to a listener of the service account on that address (the stand-in binds loopback
only; loopback inside the container is always let in):
an open listener with no CIDRs gets a loopback-only rule (it used to get none); a port of the
torch.distributed stretch is covered, not only the API port; stopping the rule's unit stops
the server and leaves the table; a failed change rolls the rule back with the unit and env;
back on a loopback API the rule stays, loopback only (every server has one).
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.error
import urllib.request

import pytest
from test_sglang_server import KNOWN_GOOD, SERVICE, UNIT, converge, healthy

INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", "")
FIREWALL = f"{SERVICE}-firewall"
RULE = f"/etc/gpuhost/{FIREWALL}.nft"
OPEN = {"sglang_server_host": "0.0.0.0"}

pytestmark = pytest.mark.skipif(not INVENTORY, reason="runs under molecule verify")


def address(host) -> str:
    return host.check_output("hostname -I").split()[0]


def reachable(url: str) -> bool:
    """An HTTP answer of any status from outside the container; False when dropped."""
    try:
        urllib.request.urlopen(url, timeout=3)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


@contextlib.contextmanager
def listener(host, ip: str, port: int):
    """A listener of the service account on the container's own address: the stand-in binds
    loopback only, SGLang (and torch's store, on every address) do not."""
    pidfile = f"/tmp/fw-listener-{port}.pid"
    host.run_expect(
        [0],
        f"runuser -u gpuhost -- sh -c 'cd /tmp && nohup python3 -m http.server {port} "
        f"--bind {ip} >/dev/null 2>&1 & echo $! > {pidfile}'",
    )
    try:
        for _ in range(20):
            if host.run(f"curl -s -o /dev/null http://{ip}:{port}/").rc == 0:
                break
            time.sleep(0.5)
        yield f"http://{ip}:{port}/"
    finally:
        host.run(f"kill $(cat {pidfile})")


def wait_healthy(host, seconds: int = 30) -> bool:
    for _ in range(seconds):
        if healthy(host):
            return True
        time.sleep(1)
    return False


def test_open_listener_without_cidrs_admits_loopback_only(host):
    ip = address(host)
    proc = converge(OPEN)
    assert proc.rc == 0, proc.out[-3000:]
    assert "--host 0.0.0.0" in host.file(UNIT).content_string
    assert f"BindsTo={FIREWALL}.service" in host.file(UNIT).content_string
    table = host.check_output("nft list table inet gpuhost_sglang")
    assert "saddr" not in table and "drop" in table, table
    assert wait_healthy(host)  # loopback still reaches it
    # The attack reaches a port the rule does not cover (so a drop below is the rule's)...
    with listener(host, ip, 33000) as url:
        assert reachable(url)
    # ...but not the API port (before the fix an empty list made no rule at all), nor the
    # stretch SGLang draws its torch.distributed port from (port + 500 here), which the rule
    # did not cover before either.
    for port in (30000, 30500):
        with listener(host, ip, port) as url:
            assert not reachable(url), port
    # The rule is part of the known-good config.
    assert host.file(f"{KNOWN_GOOD}/firewall.nft").sha256sum == host.file(RULE).sha256sum


def test_stopping_the_rule_stops_the_server_and_keeps_the_table(host):
    assert host.service(SERVICE).is_running
    host.run_test(f"systemctl stop {FIREWALL}.service")
    assert not host.service(SERVICE).is_running  # BindsTo: no server without its rule
    assert host.run("nft list table inet gpuhost_sglang").rc == 0  # no ExecStop: table stays
    # Starting the server brings the rule's unit back first.
    host.run_test(f"systemctl start {SERVICE}.service")
    assert host.check_output(f"systemctl is-active {FIREWALL}.service") == "active"
    assert wait_healthy(host)


def test_a_failed_change_rolls_the_rule_back_with_the_config(host):
    ip = address(host)
    before = host.file(RULE).sha256sum
    proc = converge(
        {
            **OPEN,
            "sglang_server_firewall_cidrs": ["172.16.0.0/12", "192.168.0.0/16", "10.0.0.0/8"],
            "sglang_server_flags": {"--max-running-requests": 32},
            "sglang_server_extra_env": {"SGLANG_STANDIN_FAULT": "crash-on-start"},
        }
    )
    assert proc.rc != 0
    assert proc.said("Rolled back to the known-good unit and env")
    # The rule the failed config wrote (which let this machine in) is gone with it.
    assert host.file(RULE).sha256sum == before
    assert "saddr" not in host.check_output("nft list table inet gpuhost_sglang")
    assert wait_healthy(host)
    with listener(host, ip, 30000) as url:
        assert not reachable(url)


def test_with_cidrs_the_networks_get_in(host):
    ip = address(host)
    proc = converge({**OPEN, "sglang_server_firewall_cidrs": ["172.16.0.0/12", "192.168.0.0/16"]})
    assert proc.rc == 0, proc.out[-3000:]
    assert wait_healthy(host)
    # This machine reaches the container from the docker bridge (a private network).
    with listener(host, ip, 30000) as url:
        assert reachable(url)


def test_back_on_loopback_the_rule_stays_loopback_only(host):
    # Every server keeps its rule (torch's store listens on every address even under a
    # loopback API); with the API back on loopback only loopback gets in.
    ip = address(host)
    proc = converge()
    assert proc.rc == 0, proc.out[-3000:]
    assert healthy(host)
    table = host.check_output("nft list table inet gpuhost_sglang")
    assert "saddr" not in table and "drop" in table, table
    assert f"BindsTo={FIREWALL}.service" in host.file(UNIT).content_string
    assert host.file(f"{KNOWN_GOOD}/firewall.nft").sha256sum == host.file(RULE).sha256sum
    with listener(host, ip, 30500) as url:
        assert not reachable(url)
