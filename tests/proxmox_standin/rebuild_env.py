# Copyright: gpuhost contributors
# Apache-2.0
"""A rebuild test bed: the Proxmox API stand-in (TEST DOUBLE) whose VMs are real systemd
containers (vm_containers.DockerVms), an SSH key, and an inventory of one GPU VM in groups
proxmox_vms and gpu_hosts. Used by tests/test_proxmox_rebuild.py and bench/rebuild.py.

The VM gets the project's test doubles the way a cloud image would carry them: the `hf`
CLI stand-in (tests/standin/hf_standin.py) at /usr/local/bin/hf-standin, and the SGLang
stand-in as the server (no GPU). Its model cache (HF_HOME) is the model disk: a docker
volume the stand-in keeps across destroy and create.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def sibling(name):
    """A module of tests/proxmox_standin, loaded once by its path (no sys.path edits)."""
    key = f"proxmox_standin.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


_pve = sibling("pve_standin")
_vms = sibling("vm_containers")
ALL_PRIVS, PveStandin, StandinServer = _pve.ALL_PRIVS, _pve.PveStandin, _pve.StandinServer
DockerVms, ensure_ssh_image = _vms.DockerVms, _vms.ensure_ssh_image


def _standin_doubles(container: str) -> None:
    """What the VM's image carries in this test, where a GPU VM has the real things: the
    stand-in `sglang` package in the server's venv, device nodes, an nvidia-smi double
    (tests/blank/sandbox.py standin_doubles, tests/standin/prepare_sglang_host.yml)."""
    spec = importlib.util.spec_from_file_location("blank_sandbox", ROOT / "tests/blank/sandbox.py")
    box = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(box)
    box.standin_doubles(
        f"{container},",
        "-e", "ansible_connection=community.docker.docker",
        "-e", "ansible_python_interpreter=/usr/bin/python3",
        "-e", "standin_hosts=all",
    )  # fmt: skip


HF_HOME = "/var/cache/gpuhost/huggingface"
HUB_TOKEN = "hf_rebuildTestToken0123456789"  # fake; model_cache reads $HF_TOKEN
STANDIN_LOG = "hf-standin.log"  # the hf stand-in's own record, left out of model_disk()
VMID = 201
VM = "gpu-vm1"


class RebuildBed(contextlib.AbstractContextManager):
    def __init__(self, api_port, ssh_port, workdir=None, prefix="gpuhost-rebuild"):
        self.api_port, self.ssh_port, self.prefix = api_port, ssh_port, prefix
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="gpuhost-rebuild-"))
        self.secret = None
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        ensure_ssh_image()
        key = self.dir / "id_ed25519"
        if not key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
            )
        self.key = key
        self.vms = DockerVms(
            {VMID: self.ssh_port},
            mounts={"scsi1": HF_HOME},
            files={"/usr/local/bin/hf-standin": str(ROOT / "tests/standin/hf_standin.py")},
            prefix=self.prefix,
            prepare=_standin_doubles,
        )
        self.api = PveStandin(
            on_start=self.vms.on_start,
            on_stop=self.vms.on_stop,
            on_destroy=self.vms.on_destroy_volume,
        )
        self.secret = self.api.add_token("gpuhost@pve", "gpuhost", ALL_PRIVS)
        self._stack.enter_context(StandinServer(self.api, self.api_port))
        self._stack.callback(lambda: self.vms.cleanup(self.api.volume_names().values()))
        self.inventory = self._write_inventory()
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def _write_inventory(self):
        host = {
            "ansible_host": "127.0.0.1",
            "ansible_port": self.ssh_port,
            "ansible_user": "debian",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": (
                "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
            ),
            "proxmox_vm_api_host": "127.0.0.1",
            "proxmox_vm_api_port": self.api_port,
            "proxmox_vm_api_user": "gpuhost@pve",
            "proxmox_vm_api_token_id": "gpuhost",
            "proxmox_vm_validate_certs": False,
            "proxmox_vm_node": "pve1",
            "proxmox_vm_vmid": VMID,
            "proxmox_vm_template": "debian-12-cloud",
            "proxmox_vm_cores": 2,
            "proxmox_vm_memory_mib": 4096,
            "proxmox_vm_ssh_keys": [(self.key.with_suffix(".pub")).read_text().strip()],
            "proxmox_vm_gpus": ["gpu0", "gpu1"],
            "proxmox_vm_model_disk": {"slot": "scsi1", "storage": "local-lvm", "size_gib": 10},
            # the container has no GPU (as in make demo): no driver, no CUDA, no SGLang stack;
            # the server is the SGLang stand-in, the hub the hf stand-in
            "python_env_enabled": False,
            "nvidia_driver_enabled": False,
            "cuda_toolkit_enabled": False,
            "proxmox_guest_read_dmesg": False,
            # The VM's "GPUs" are test doubles (_standin_doubles): the recorded host's profile,
            # which runs the model's code, so a pinned commit (the hf stand-in downloads it).
            "sglang_server_profile": "glm5-nvfp4-8x-rtx-pro-6000",
            "sglang_server_revision": "87663416be779d980e4aa102edc328b85d7802f6",
            # No torch without the SGLang stack: nccl.env is written, not measured.
            "nccl_verify": False,
            "model_cache_hf_cli": "/usr/local/bin/hf-standin",
            "model_cache_expected_size_gib": 1,
            "model_cache_free_margin_gib": 1,
            "model_cache_poll_interval": 1,
            # A fake hub token the stand-in requires: the test searches the -vvv run record
            # and the VM's journal (where sudo logs every command it runs) for it.
            "model_cache_download_environment": {
                "HF_STANDIN_GATED": "1",
                "HF_STANDIN_LOG": HF_HOME + "/" + STANDIN_LOG,
            },
        }
        inv = self.dir / "hosts.yml"
        inv.write_text(
            json.dumps({"proxmox_vms": {"hosts": {VM: host}}, "gpu_hosts": {"hosts": {VM: {}}}})
        )
        return inv

    def env(self):
        return dict(
            os.environ,
            GPUHOST_PROXMOX_TOKEN_SECRET=self.secret,
            HF_TOKEN=HUB_TOKEN,
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            GPUHOST_RUNS_DIR=str(self.dir / "runs"),
            PYTHONWARNINGS="ignore",
        )

    def vm_exec(self, *argv):
        """Run argv in the VM's container as root; its stdout."""
        return subprocess.run(
            ["docker", "exec", self.vms.container(VMID), *argv],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    def model_disk(self):
        """{relative path: (size, mtime_ns, sha256)} of the files on the VM's model disk."""
        script = (
            "import hashlib,os,json,sys\n"
            "out={}\n"
            f"for r,_,fs in os.walk({HF_HOME!r}):\n"
            "  for f in fs:\n"
            "    p=os.path.join(r,f)\n"
            f"    if os.path.islink(p) or f == {STANDIN_LOG!r}: continue\n"
            "    st=os.stat(p); h=hashlib.sha256(open(p,'rb').read()).hexdigest()\n"
            f"    out[os.path.relpath(p,{HF_HOME!r})]=[st.st_size,st.st_mtime_ns,h]\n"
            "json.dump(out,sys.stdout)\n"
        )
        proc = subprocess.run(
            ["docker", "exec", self.vms.container(VMID), "python3", "-c", script],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(proc.stdout)
