"""A serving group's preflight through the real ansible-playbook (issue 30): two "nodes" on this
machine (local connections, both at this machine's own address) run role preflight. The group
checks run after every node read its facts: all nodes in the run, the nodes agree, they reach
each other (a refusal is an open path), and the interface NCCL_SOCKET_IFNAME selects carries
the group address (role nccl's check, run here before any change). A node whose group address
drops the traffic, or an interface that does not carry it, fails before anything is changed."""

from __future__ import annotations

import re
import subprocess

import pytest
from gpuhost_fakes import ROOT, run_playbook

PLAY = """
- hosts: gpu_hosts
  gather_facts: false
  roles:
    - role: gpuhost.gpu.preflight
  tasks:
    - ansible.builtin.debug:
        msg: "{{ gpuhost_findings | selectattr('check', 'match', '(preflight.group|nccl.group)')
                 | map(attribute='check') | zip(gpuhost_findings
                 | selectattr('check', 'match', '(preflight.group|nccl.group)')
                 | map(attribute='status')) | map('join', '=') | list }}"
    # What playbooks/preflight.yml runs after every role that adds findings (this machine
    # has no GPU: the gate stops on that too, so the pass case does not run it).
    - ansible.builtin.include_role:
        name: gpuhost.gpu.preflight
        tasks_from: gate
      when: gate | default(false) | bool
"""


def _own_address():
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout.split()
    if len(out) < 4:
        pytest.skip("this machine has no global IPv4 address")
    return out[1], out[3].split("/")[0]


def _run(tmp_path, address_b, ifname, gate=False):
    iface, address = _own_address()
    (tmp_path / "group_vars").symlink_to(ROOT / "group_vars")
    (tmp_path / "play.yml").write_text(PLAY)
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    python = ROOT / ".venv" / "bin" / "python"
    node = "{ansible_connection: local, ansible_python_interpreter: %s, sglang_server_group: g,"
    node += " sglang_server_dist_init_port: 39503, sglang_server_group_address: %s,"
    node += " sglang_server_port: %d}"
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_hosts:\n      hosts:\n"
        f"        na: {node % (python, address, 39501)}\n"
        f"        nb: {node % (python, address_b or address, 39502)}\n"
    )
    (inv / "group_vars" / "gpu_hosts.yml").write_text(
        f"nccl_env_overrides: {{NCCL_SOCKET_IFNAME: '{ifname or '=' + iface}'}}\n"
        "preflight_command_timeout: 2\n"
    )
    args = ["-i", inv / "hosts.yml", tmp_path / "play.yml", "-e", f"gate={gate}"]
    proc = run_playbook(args, tmp_path / "facts")
    return proc.returncode, proc.stdout + proc.stderr


def test_nodes_that_reach_each_other_on_the_interface_pass(tmp_path):
    rc, out = _run(tmp_path, None, None)
    assert rc == 0, out[-3000:]
    for check in ("members", "reach", "flags", "venv_lock"):
        assert f"preflight.group.g.{check}=pass" in out, out[-3000:]
    assert "nccl.group.interface=pass" in out, out[-3000:]


def test_a_dropped_path_and_an_interface_without_the_address_stop_before_any_change(tmp_path):
    # nb's group address is TEST-NET-1 (RFC 5737): na's connect to it is dropped or unroutable;
    # and lo does not carry either address.
    rc, out = _run(tmp_path, "192.0.2.77", "lo", gate=True)
    assert rc != 0, out[-3000:]
    assert "preflight.group.g.reach=fail" in out and "nccl.group.interface=fail" in out, out
    assert re.search(r"na cannot reach nb at 192\.0\.2\.77:39502", out), out[-3000:]
    assert "Stop before any change when a check failed" in out, out[-3000:]
    assert "NCCL_SOCKET_IFNAME" in out, out[-3000:]
