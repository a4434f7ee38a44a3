"""A rollout never strands a drained worker, and never goes on past a host it lost
(issue 15 item 7). Real ansible-playbook on this machine, connection local for the
workers; the "router" that cannot be reached is an SSH host on a closed loopback port."""

from __future__ import annotations

import re
import sys
import textwrap

from gpuhost_fakes import run_playbook

from gpuhost.rollout import rollout_section


def _play(tmp_path, inventory: str, playbook: str) -> tuple[int, str]:
    (tmp_path / "hosts.ini").write_text(textwrap.dedent(inventory))
    (tmp_path / "play.yml").write_text(textwrap.dedent(playbook))
    proc = run_playbook(
        [tmp_path / "play.yml", "-i", tmp_path / "hosts.ini"],
        tmp_path / "facts",
        env={"ANSIBLE_SSH_ARGS": "-o ConnectTimeout=3"},
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_an_unreachable_router_fails_the_drain_as_a_task_so_rescue_and_always_run(tmp_path):
    # Without ignore_unreachable on the delegated calls the worker host itself is marked
    # unreachable: no rescue, no always, and the worker stays drained on the other routers.
    rc, out = _play(
        tmp_path,
        f"""
        [gpu_hosts]
        w1 ansible_connection=local ansible_python_interpreter={sys.executable}
        [routers]
        r1 ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody
        """,
        """
        - hosts: gpu_hosts
          gather_facts: false
          tasks:
            - name: Drain, as rolling_update does
              block:
                - name: Drain
                  ansible.builtin.include_role:
                    name: sglang_router
                    tasks_from: drain
                  vars:
                    sglang_router_worker: http://127.0.0.1:30000
                    sglang_router_routers: "{{ groups['routers'] }}"
              rescue:
                - name: Rescued
                  ansible.builtin.debug:
                    msg: "RESCUED: {{ ansible_failed_result.msg }}"
              always:
                - name: Always
                  ansible.builtin.debug:
                    msg: ALWAYS RAN
        """,
    )
    assert "RESCUED: drain, finding the worker: router(s) r1 unreachable for worker " in out, out
    assert "ALWAYS RAN" in out, out
    assert rc == 0, out
    assert re.search(r"w1\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", out), out


def test_a_lost_host_stops_the_rollout_before_the_next_batch(tmp_path):
    # serial 2: w1 is fine, w2 (same batch) cannot be reached, w3 (next batch) must never be
    # touched; Ansible alone goes on to w3 here.
    rc, out = _play(
        tmp_path,
        f"""
        [gpu_hosts]
        w1 ansible_connection=local ansible_python_interpreter={sys.executable}
        w2 ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody
        w3 ansible_connection=local ansible_python_interpreter={sys.executable}
        """,
        """
        - hosts: gpu_hosts
          gather_facts: false
          serial: 2
          max_fail_percentage: 0
          tasks:
            - name: The batch guard rolling_update runs first
              ansible.builtin.include_role:
                name: rolling_update
                tasks_from: batch_guard
            - name: Touch
              ansible.builtin.ping:
            - name: Updated
              ansible.builtin.debug:
                msg: "UPDATED {{ inventory_hostname }}"
        """,
    )
    assert rc != 0, out
    assert "UPDATED w1" in out and "UPDATED w3" not in out, out
    assert "w2 failed or was unreachable in an earlier batch: the rollout stops" in out, out


def test_an_unreachable_target_is_reported_unknown_not_old():
    section = rollout_section(
        {"w1": {"state": "updated", "config": "c"}}, ["w1", "w2", "w3"], unreachable=["w2"]
    )
    assert section["w1"]["state"] == "updated"
    assert section["w2"]["state"] == "unknown" and section["w2"]["runs"] == "unknown"
    assert "unreachable" in section["w2"]["message"]
    assert section["w3"]["state"] == "not_reached"
