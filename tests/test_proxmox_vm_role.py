"""Role proxmox_vm against the Proxmox API stand-in (tests/proxmox_standin, a test double):
the real ansible-playbook and the real community.proxmox modules create the VM, a second run
changes nothing, check mode shows the diff and changes nothing, a bad spec stops before any
request that changes something, and every request the role sent passed the schema check.

The node step (`qm set --args`, root only) runs on the node host the spec names, here a local
connection with the `qm` stand-in (tests/proxmox_standin/bin/qm, a test double) on PATH, which
sets the args as root@pam: the token itself is refused `args` by the API stand-in, as by
Proxmox. tests/test_proxmox_vm_spec.py covers the refusal when args are needed and no node
host is named."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
from proxmox_standin import specs  # noqa: E402
from proxmox_standin.pve_standin import ALL_PRIVS, PveStandin, StandinServer  # noqa: E402

PORT = 18610
KEY = specs.KEY
WRITES = ("POST", "PUT", "DELETE")


def _inventory(tmp_path, **overrides):
    return specs.inventory(tmp_path, PORT, **overrides)


def _play(inv, secret, *extra, env_extra=None):
    env = specs.play_env(secret, **(env_extra or {}))
    cmd = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "playbooks/vm.yml",
        "-i",
        str(inv),
    ]
    proc = subprocess.run(
        [*cmd, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    recap = re.search(
        r"gpu-vm1\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", proc.stdout
    )
    assert recap, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, int(recap.group(2)), int(recap.group(3))


@pytest.fixture()
def standin():
    api = PveStandin()
    secret = api.add_token("gpuhost@pve", "gpuhost", ALL_PRIVS)
    with StandinServer(api, PORT):
        yield api, secret


def test_create_then_nothing_changes_then_check_mode_diff(tmp_path, standin):
    api, secret = standin
    inv = _inventory(tmp_path)
    proc, changed, failed = _play(inv, secret)
    assert failed == 0 and changed >= 3, proc.stdout[-4000:]
    vm = api.state["vms"]["201"]
    cfg = vm["config"]
    assert vm["status"] == "running"
    assert cfg["hostpci0"] == "mapping=gpu0,pcie=1" and cfg["hostpci1"] == "mapping=gpu1,pcie=1"
    assert cfg["memory"] == "16384" and cfg["cpu"] == "host,phys-bits=host"
    assert (
        cfg["efidisk0"].startswith("local-lvm:vm-201-disk-")
        and "pre-enrolled-keys=0" in cfg["efidisk0"]
    )
    assert cfg["scsi1"].startswith("local-lvm:vm-201-disk-") and "size=200G" in cfg["scsi1"]
    assert cfg["tags"] == "gpuhost" and cfg["ciuser"] == "debian"
    assert "args" not in cfg

    proc, changed, failed = _play(inv, secret)
    assert (changed, failed) == (0, 0), proc.stdout[-4000:]

    before = json.dumps(api.state, sort_keys=True)
    writes = sum(e["method"] in WRITES for e in api.log)
    proc, changed, failed = _play(
        _inventory(tmp_path, proxmox_vm_memory_mib=32768), secret, "--check", "--diff"
    )
    assert failed == 0 and changed == 1, proc.stdout[-4000:]
    assert "-memory: 16384" in proc.stdout and "+memory: 32768" in proc.stdout
    assert json.dumps(api.state, sort_keys=True) == before
    assert sum(e["method"] in WRITES for e in api.log) == writes

    # every request the role made was valid for Proxmox's schema and allowed to the token
    assert [e for e in api.log if e["status"] != 200] == []
    assert secret not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (
            {"proxmox_vm_gpus": ["gpu0", "gpu9"]},
            "proxmox_vm_gpus[1]='gpu9': no such PCI resource mapping",
        ),
        ({"proxmox_vm_memory_mib": 131072}, "proxmox_vm_memory_mib=131072: more than node pve1"),
        ({"proxmox_vm_vmid": 150}, "proxmox_vm_vmid=150: in use by VM 'db'"),
        (
            {"proxmox_vm_gpu_clique": True},
            "proxmox_vm_node_ssh_host='': the spec needs the VM option `args`",
        ),
        ({"proxmox_vm_cpu": "host,phys-bits=99"}, "proxmox_vm_cpu='host,phys-bits=99'"),
    ],
)
def test_bad_spec_stops_before_any_change(tmp_path, standin, overrides, words):
    api, secret = standin
    before = json.dumps(api.state, sort_keys=True)
    proc, _changed, failed = _play(_inventory(tmp_path, **overrides), secret)
    assert failed == 1
    assert words in proc.stdout, proc.stdout[-3000:]
    assert json.dumps(api.state, sort_keys=True) == before
    assert not [e for e in api.log if e["method"] in WRITES]


def _vault_inventory(tmp_path, secret: str, password: str) -> Path:
    """The token secret as inline Ansible Vault ciphertext, as a user keeps it."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault = VaultLib([("default", VaultSecret(password.encode()))])
    cipher = vault.encrypt(secret).decode()
    plain = json.loads(_inventory(tmp_path).read_text())
    host = plain["proxmox_vms"]["hosts"]["gpu-vm1"]
    lines = ["proxmox_vms:", "  hosts:", "    gpu-vm1:"]
    lines += [f"      {k}: {json.dumps(v)}" for k, v in host.items()]
    lines.append("      proxmox_vm_api_token_secret: !vault |")
    lines += [f"        {line}" for line in cipher.splitlines()]
    inv = tmp_path / "vault-hosts.yml"
    inv.write_text("\n".join(lines) + "\n")
    return inv


def test_vm_create_reads_the_token_from_vault_through_the_cli(tmp_path, standin):
    """`gpuhost vm create --vault-password-file` hands the password file to ansible-playbook;
    the decrypted secret reaches the API and no run record."""
    api, secret = standin
    password = "gpuhost-test-vault-pass-5c1e"
    inv = _vault_inventory(tmp_path, secret, password)
    (tmp_path / "pw").write_text(password + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUHOST_", "ANSIBLE_"))}
    env.update(PYTHONWARNINGS="ignore", COLUMNS="200")
    runs = tmp_path / "runs"
    base = [str(Path(sys.executable).parent / "gpuhost"), "--project-dir", str(ROOT),
            "--runs-dir", str(runs), "vm", "create", "-i", str(inv), "-l", "gpu-vm1",
            "-e", "proxmox_vm_start=false", "--json"]  # fmt: skip

    # Without the password the run fails on the ciphertext and changes nothing.
    proc = subprocess.run(base, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "vault" in (proc.stdout + proc.stderr).lower()
    assert not [e for e in api.log if e["method"] in WRITES]

    proc = subprocess.run(
        [*base, "--vault-password-file", str(tmp_path / "pw")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "201" in {str(v) for v in api.state["vms"]}, api.state["vms"].keys()
    assert [e for e in api.log if e["status"] != 200] == []
    for path in runs.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert secret not in text and password not in text, path


def test_clique_args_are_set_as_root_on_the_node_once(tmp_path, standin):
    api, secret = standin
    api.state["passwords"]["root@pam"] = "gpuhost-test-root-pw-8d2f"
    inv = _inventory(tmp_path, proxmox_vm_gpu_clique=True, proxmox_vm_node_ssh_host="pve-node")
    hosts = json.loads(inv.read_text())
    node = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts["proxmox_nodes"] = {"hosts": {"pve-node": node}}
    inv.write_text(json.dumps(hosts))
    qm_env = {
        "PATH": f"{ROOT / 'tests' / 'proxmox_standin' / 'bin'}:{os.environ['PATH']}",
        "GPUHOST_QM_STANDIN_URL": f"https://127.0.0.1:{PORT}",
        "GPUHOST_QM_STANDIN_NODE": "pve1",
        "GPUHOST_QM_STANDIN_PASSWORD": "gpuhost-test-root-pw-8d2f",
    }
    proc, _changed, failed = _play(inv, secret, env_extra=qm_env)
    assert failed == 0, proc.stdout[-4000:]
    args = api.state["vms"]["201"]["config"]["args"]
    for n in (0, 1):
        assert f"device.hostpci{n}.x-nv-gpudirect-clique=0" in args, args
    setters = [e for e in api.log if e["method"] == "PUT" and "args" in e.get("params", {})]
    assert setters and {e["user"] for e in setters} == {"root@pam"}, setters
    # The second run reads the args back and does not set them again.
    count = len(setters)
    proc, changed, failed = _play(inv, secret, env_extra=qm_env)
    assert (changed, failed) == (0, 0), proc.stdout[-4000:]
    assert (
        len([e for e in api.log if e["method"] == "PUT" and "args" in e.get("params", {})]) == count
    )
