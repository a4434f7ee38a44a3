"""The top-level group_vars/ must reach a play both through site.yml and when a playbook
under playbooks/ is run on its own (playbooks/group_vars links to ../group_vars and
ansible.cfg keeps playbook_vars_root = top).

The test copies the real ansible.cfg, group_vars/ and the playbooks/group_vars link into a
scratch tree, adds a probe playbook that prints a group_vars value, and runs real
ansible-playbook both ways.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROBE = """\
- name: Probe
  hosts: gpu_hosts
  gather_facts: false
  tasks:
    - name: Show the service user from group_vars
      ansible.builtin.debug:
        msg: "probe={{ gpuhost_service_user }}"
"""


def _scratch(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "playbooks").mkdir(parents=True)
    shutil.copy(ROOT / "ansible.cfg", tree / "ansible.cfg")
    shutil.copytree(ROOT / "group_vars", tree / "group_vars")
    link = ROOT / "playbooks" / "group_vars"
    assert link.is_symlink(), "playbooks/group_vars must link to ../group_vars"
    os.symlink(os.readlink(link), tree / "playbooks" / "group_vars")
    (tree / "playbooks" / "probe.yml").write_text("---\n" + PROBE)
    (tree / "site.yml").write_text(
        "---\n- name: Stage\n  ansible.builtin.import_playbook: playbooks/probe.yml\n"
    )
    # The inventory sits in a folder of its own so that its group_vars lookup cannot find
    # the top-level group_vars/ and mask what this test is about.
    (tree / "inventory").mkdir()
    (tree / "inventory" / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_hosts:\n      hosts:\n        probe-host:\n"
        "          ansible_connection: local\n"
        f"          ansible_python_interpreter: {sys.executable}\n"
    )
    return tree


def _probe(tree: Path, playbook: str) -> str:
    env = dict(os.environ, ANSIBLE_CONFIG=str(tree / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    bindir = Path(sys.executable).parent
    out = subprocess.run(
        [str(bindir / "ansible-playbook"), "-i", "inventory/hosts.yml", playbook],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"msg: (probe=\S*)", out.stdout)
    assert found, out.stdout
    return found.group(1)


def test_group_vars_apply_through_site_and_directly(tmp_path):
    expected = yaml.safe_load((ROOT / "group_vars/all/gpuhost.yml").read_text())
    want = f"probe={expected['gpuhost_service_user']}"
    tree = _scratch(tmp_path)
    assert _probe(tree, "site.yml") == want
    assert _probe(tree, "playbooks/probe.yml") == want


def test_probe_fails_without_the_link(tmp_path):
    """Without playbooks/group_vars the direct run must not see the value: the link is
    what makes the second path work, so the test above can fail."""
    tree = _scratch(tmp_path)
    (tree / "playbooks" / "group_vars").unlink()
    env = dict(os.environ, ANSIBLE_CONFIG=str(tree / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    bindir = Path(sys.executable).parent
    out = subprocess.run(
        [str(bindir / "ansible-playbook"), "-i", "inventory/hosts.yml", "playbooks/probe.yml"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "gpuhost_service_user" in out.stdout + out.stderr
