# Copyright: gpuhost contributors
# Apache-2.0
"""VMs of the Proxmox API stand-in as real systemd containers: a TEST DOUBLE for a Proxmox
node's QEMU.

When the stand-in (pve_standin.py) starts a VM, DockerVms starts a systemd container from the
project's base image (gpuhost/debian:12 plus openssh-server, built once as
gpuhost-rebuild/debian:12-ssh), applies the VM's cloud-init settings the way cloud-init
would (user `ciuser` with the `sshkeys` in authorized_keys and passwordless sudo), and
publishes its sshd on 127.0.0.1:<port>. Disks listed in `mounts` ({slot: path}) are docker
volumes that belong to the stand-in's storage volume, not to the container: they outlive a
stop and a destroy of the VM (unless the volume itself is destroyed), which is how the model
disk survives a rebuild. Stopping the VM removes the container.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from urllib.parse import unquote

BASE_IMAGE = "gpuhost/debian:12"
SSH_IMAGE = "gpuhost-rebuild/debian:12-ssh"
PREFIX = "gpuhost-rebuild"


def _docker(*args, check=True, timeout=300):
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=check, timeout=timeout
    )


def ensure_ssh_image(base=BASE_IMAGE, image=SSH_IMAGE):
    """Build the sshd image once (apt-get install openssh-server on the base image)."""
    if _docker("image", "inspect", image, check=False).returncode == 0:
        return image
    name = f"{PREFIX}-build-{int(time.time())}"
    _docker("run", "--name", name, base, "sh", "-c",
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
            "--no-install-recommends openssh-server >/dev/null && systemctl enable ssh "
            "&& rm -f /etc/ssh/ssh_host_*", timeout=900)  # fmt: skip
    try:
        _docker("commit", "-c", 'CMD ["/lib/systemd/systemd"]', name, image)
    finally:
        _docker("rm", "-f", name, check=False)
    return image


class DockerVms:
    """on_start/on_stop/on_destroy hooks for PveStandin."""

    def __init__(
        self, ssh_ports, mounts=None, files=None, image=SSH_IMAGE, prefix=PREFIX, prepare=None
    ):
        self.ssh_ports = {str(k): int(v) for k, v in ssh_ports.items()}
        self.mounts = mounts or {}
        # {path in the VM: file here}: what the cloud image carries (test doubles)
        self.files = files or {}
        # prepare(container name): more of what the image carries (test doubles), after files
        self.prepare = prepare
        self.image = image
        self.prefix = prefix
        self.started = []

    def container(self, vmid):
        return f"{self.prefix}-vm{vmid}"

    def volume(self, docker_name):
        return f"{self.prefix}-{docker_name}"

    def on_start(self, vmid, vm, volumes):
        cfg = vm["config"]
        name = self.container(vmid)
        _docker("rm", "-f", name, check=False)
        args = [
            "run", "-d", "--name", name, "--hostname", cfg.get("name", name),
            # NET_ADMIN: the server's nftables port rule, in the container's own network.
            "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cgroupns", "host",
            "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
            "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
        ]  # fmt: skip
        port = self.ssh_ports.get(str(vmid))
        if port:
            args += ["-p", f"127.0.0.1:{port}:22"]
        for slot, path in self.mounts.items():
            volid = cfg.get(slot, "").split(",")[0]
            docker_name = volumes.get(volid)
            if docker_name:
                args += ["-v", f"{self.volume(docker_name)}:{path}"]
        _docker(*args, self.image, "/lib/systemd/systemd")
        self.started.append(name)
        for dest, src in self.files.items():
            _docker("cp", src, f"{name}:{dest}")
            _docker("exec", name, "chmod", "0755", dest)
        if self.prepare:
            self.prepare(name)
        user = cfg.get("ciuser", "debian")
        keys = unquote(cfg.get("sshkeys", ""))
        script = (
            f"id {shlex.quote(user)} >/dev/null 2>&1 || useradd -m -s /bin/bash "
            f"{shlex.quote(user)}; home=$(getent passwd {shlex.quote(user)} | cut -d: -f6); "
            'install -d -m 700 -o "$(id -u ' + shlex.quote(user) + ')" "$home/.ssh"; '
            f'printf %s\\\\n {shlex.quote(keys)} > "$home/.ssh/authorized_keys"; '
            f'chown {shlex.quote(user)} "$home/.ssh/authorized_keys"; '
            'chmod 600 "$home/.ssh/authorized_keys"; '
            f"echo {shlex.quote(user + ' ALL=(ALL) NOPASSWD:ALL')} > /etc/sudoers.d/90-cloud-init; "
            "ssh-keygen -A >/dev/null; "
            "for i in $(seq 1 60); do systemctl is-system-running >/dev/null 2>&1 && break; "
            "s=$(systemctl is-system-running 2>/dev/null); "
            '[ "$s" = degraded ] && break; sleep 0.5; done; '
            # the unit was enabled in the image and may have given up before the keys existed
            "systemctl reset-failed ssh; systemctl restart ssh"
        )
        _docker("exec", name, "bash", "-c", script)

    def on_stop(self, vmid, vm):
        _docker("rm", "-f", self.container(vmid), check=False)

    def on_destroy_volume(self, docker_name):
        _docker("volume", "rm", "-f", self.volume(docker_name), check=False)

    def cleanup(self, volumes=()):
        for name in self.started:
            _docker("rm", "-f", name, check=False)
        for docker_name in volumes:
            self.on_destroy_volume(docker_name)
