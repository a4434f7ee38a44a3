#!/usr/bin/env python3
"""TEST HARNESS of `make vm-smoke` (docs/vm-smoke.md): boots one real VM and runs the CLI at it.

scripts/vm-smoke.sh builds the image (debootstrap, an ext4 root disk and an EFI system
partition with Debian's signed shim, grub and kernel) and then runs this. Here:

1. an SSH key, the stand-in NVIDIA repository (standin_dkms_repo.py, a TEST DOUBLE) served
   over HTTP on 127.0.0.1 (the VM sees the host as 10.0.2.2, QEMU user networking);
2. a NoCloud seed with the cloud-init that Proxmox renders for a VM made by role proxmox_vm
   (seed.py); a qcow2 overlay on the cached base image and a fresh copy of OVMF's variables
   with Microsoft's keys enrolled: Secure Boot on;
3. QEMU (software emulation: this machine's /dev/kvm cannot run it), booting OVMF -> shim ->
   grub -> the signed kernel from the ESP, every wait bounded;
4. `gpuhost check`, then `gpuhost provision --tags host` twice: without a Machine Owner Key
   (role nvidia_driver must refuse under Secure Boot) and with one DKMS signs with (created in
   the VM, not enrolled: enrolling needs the MOK manager at the console), which builds the
   stand-in module, fails to load it (lockdown), reboots with ansible.builtin.reboot and reports;
5. the record in <cache>/record/: record.json (timings, exit codes), the CLI outputs, and what
   the VM says (`mokutil --sb-state`, the SecureBoot efivar, `dkms status`, boot ids, dmesg).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import seed  # noqa: E402

OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.secboot.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.ms.fd")
MAC = "52:54:00:12:34:56"
EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
MOK_KEY, MOK_CERT = "/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub"


def now() -> float:
    return time.monotonic()


def log(msg: str) -> None:
    print(
        f"{time.strftime('%H:%M:%S', time.gmtime())} vm-smoke: {msg}", file=sys.stderr, flush=True
    )


class Smoke:
    def __init__(self, cache: Path, ssh_port: int, repo_port: int, memory: int):
        self.cache, self.ssh_port, self.repo_port, self.memory = cache, ssh_port, repo_port, memory
        self.record_dir = cache / "record"
        self.vm_dir = cache / "vm"
        self.record: dict = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.t0 = now()
        self.qemu: subprocess.Popen | None = None

    # --- record -------------------------------------------------------------------------
    def save(self) -> None:
        self.record["elapsed_s"] = round(now() - self.t0, 1)
        (self.record_dir / "record.json").write_text(json.dumps(self.record, indent=2) + "\n")

    def write(self, name: str, text: str) -> None:
        (self.record_dir / name).write_text(text)

    # --- setup --------------------------------------------------------------------------
    def ssh_key(self) -> Path:
        key = self.cache / "ssh" / "id_ed25519"
        if not key.exists():
            key.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "gpuhost-vm-smoke",
                    "-f",
                    str(key),
                ],
                check=True,
            )
        return key

    def serve_repo(self) -> None:
        repo = self.cache / "repo"
        subprocess.run(
            [
                sys.executable,
                str(HERE / "standin_dkms_repo.py"),
                str(repo),
                str(self.cache / "repo-key.asc"),
            ],
            check=True,
            capture_output=True,
        )
        handler = functools.partial(_QuietHandler, directory=str(repo))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.repo_port), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        log(f"stand-in repository on http://127.0.0.1:{self.repo_port}/ (10.0.2.2 in the VM)")

    def make_vm(self, key: Path) -> None:
        shutil.rmtree(self.vm_dir, ignore_errors=True)
        self.vm_dir.mkdir(parents=True)
        files = seed.render(
            name="vm-smoke", ssh_keys=[(key.with_suffix(".pub")).read_text().strip()], mac=MAC
        )
        for name, text in files.items():
            (self.vm_dir / name).write_text(text)
            self.write(f"seed-{name}", text)
        subprocess.run(
            [
                "cloud-localds",
                "-N",
                str(self.vm_dir / "network-config"),
                str(self.vm_dir / "seed.img"),
                str(self.vm_dir / "user-data"),
                str(self.vm_dir / "meta-data"),
            ],
            check=True,
        )
        subprocess.run(
            [
                "qemu-img",
                "create",
                "-q",
                "-f",
                "qcow2",
                "-b",
                str(self.cache / "base.qcow2"),
                "-F",
                "qcow2",
                str(self.vm_dir / "root.qcow2"),
            ],
            check=True,
        )
        shutil.copyfile(OVMF_VARS, self.vm_dir / "OVMF_VARS.fd")
        shutil.copyfile(self.cache / "esp.img", self.vm_dir / "esp.img")

    def start_vm(self) -> None:
        d = self.vm_dir
        argv = [
            "qemu-system-x86_64",
            "-name",
            "gpuhost-vm-smoke",
            # /dev/kvm here cannot run a guest ("failed to set MSR 0x10a"): software emulation.
            "-accel",
            "tcg,tb-size=256",
            "-cpu",
            "max",
            "-m",
            str(self.memory),
            "-smp",
            "1",
            # Secure Boot needs SMM and the secure pflash (OVMF's README for the secboot build).
            "-machine",
            "q35,smm=on",
            "-global",
            "driver=cfi.pflash01,property=secure,value=on",
            "-drive",
            f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
            "-drive",
            f"if=pflash,format=raw,unit=1,file={d / 'OVMF_VARS.fd'}",
            "-drive",
            f"file={d / 'root.qcow2'},if=virtio,format=qcow2",
            "-drive",
            f"file={d / 'seed.img'},if=virtio,format=raw,readonly=on",
            "-drive",
            f"file={d / 'esp.img'},if=virtio,format=raw",
            "-netdev",
            f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
            # romfile= : no iPXE option ROM, so OVMF does not try a network boot first.
            "-device",
            f"virtio-net-pci,netdev=n0,mac={MAC},romfile=",
            "-display",
            "none",
            "-vga",
            "none",
            "-monitor",
            "none",
            "-serial",
            f"file:{self.record_dir / 'serial.log'}",
        ]
        self.record["qemu_argv"] = argv
        with open(self.record_dir / "qemu.stderr", "w") as stderr:
            self.qemu = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )
        log(f"QEMU started (pid {self.qemu.pid})")

    # --- the VM -------------------------------------------------------------------------
    def ssh_argv(self, *cmd: str) -> list[str]:
        return [
            "ssh",
            "-i",
            str(self.cache / "ssh" / "id_ed25519"),
            "-p",
            str(self.ssh_port),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=20",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "debian@127.0.0.1",
            *cmd,
        ]

    def ssh(self, cmd: str, timeout: float = 300) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(
                self.ssh_argv(cmd), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(
                exc.cmd, 124, exc.stdout or "", f"timed out after {timeout}s"
            )

    def wait_ssh(self, timeout: float) -> float | None:
        start = now()
        while now() - start < timeout:
            if self.qemu and self.qemu.poll() is not None:
                raise RuntimeError(
                    f"QEMU exited ({self.qemu.returncode}); see qemu.stderr, serial.log"
                )
            if (
                self.ssh("cloud-init status --wait >/dev/null 2>&1; true", timeout=900).returncode
                == 0
            ):
                return round(now() - start, 1)
            time.sleep(10)
        return None

    def observe(self, label: str) -> dict:
        """What the VM says about Secure Boot, the kernel, DKMS and the modules now."""
        probes = {
            "uname_r": "uname -r",
            "boot_id": "cat /proc/sys/kernel/random/boot_id",
            "uptime_s": "cut -d' ' -f1 /proc/uptime",
            "mokutil_sb_state": "mokutil --sb-state 2>&1",
            "secure_boot_efivar_hex": f"od -An -tx1 {EFIVAR} | tr -s ' ' | sed 's/^ //'",
            "lockdown": "cat /sys/kernel/security/lockdown 2>&1",
            "dkms_status": "sudo dkms status 2>&1",
            "sys_module_nvidia_version": "cat /sys/module/nvidia/version 2>&1",
            "modinfo_nvidia_signer": "/sbin/modinfo -F signer nvidia 2>&1",
            "modprobe_nvidia": "sudo /sbin/modprobe nvidia 2>&1; echo rc=$?",
            "dmesg_nvidia": (
                "sudo dmesg | grep -iE 'nvidia|lockdown|module verification|Key was' | tail -n 20"
            ),
            "dpkg_nvidia": (
                "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-*' 2>&1"
            ),
        }
        out = {}
        for key, cmd in probes.items():
            proc = self.ssh(cmd, timeout=300)
            out[key] = (proc.stdout + proc.stderr).strip()
        self.record.setdefault("observations", {})[label] = out
        self.save()
        return out

    def gpuhost(self, name: str, *args: str, timeout: float) -> dict:
        argv = [
            str(ROOT / ".venv" / "bin" / "gpuhost"),
            "--project-dir",
            str(ROOT),
            "--runs-dir",
            str(self.cache / "runs"),
            *args,
        ]
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
            "GPUHOST_VM_SMOKE_SSH_PORT": str(self.ssh_port),
            "GPUHOST_VM_SMOKE_REPO_PORT": str(self.repo_port),
            "GPUHOST_VM_SMOKE_CACHE": str(self.cache),
        }
        log(f"{name}: {' '.join(args)}")
        start = now()
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = f"timed out after {timeout}s"
        result = {"argv": args, "rc": rc, "duration_s": round(now() - start, 1)}
        self.write(f"{name}.stdout", stdout)
        self.write(f"{name}.stderr", stderr)
        self.record.setdefault("commands", {})[name] = result
        self.keep_run(name)
        self.save()
        log(f"{name}: rc {rc} after {result['duration_s']} s")
        return result

    def keep_run(self, name: str) -> None:
        """The CLI run's report.json and the driver role's task results, from its artifacts."""
        runs = sorted(p for p in (self.cache / "runs").glob("2*") if p.is_dir())
        if not runs:
            return
        run = runs[-1]
        if (run / "report.json").is_file():
            shutil.copyfile(run / "report.json", self.record_dir / f"{name}.report.json")
        events_file = self.record_dir / "driver-events.json"
        events = json.loads(events_file.read_text()) if events_file.exists() else {}
        events[name] = driver_events(run)
        events_file.write_text(json.dumps(events, indent=1))

    def stop_vm(self) -> None:
        if self.qemu and self.qemu.poll() is None:
            self.ssh("sudo systemctl poweroff", timeout=30)
            try:
                self.qemu.wait(timeout=180)
            except subprocess.TimeoutExpired:
                self.qemu.terminate()
                try:
                    self.qemu.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.qemu.kill()
                    self.qemu.wait(timeout=30)
        if self.qemu:
            self.record["qemu_rc"] = self.qemu.returncode

    # --- the run ------------------------------------------------------------------------
    def run(self, boot_timeout: float, cli_timeout: float, steps: list[str]) -> int:
        shutil.rmtree(self.record_dir, ignore_errors=True)
        self.record_dir.mkdir(parents=True)
        for port in (self.ssh_port, self.repo_port):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    raise SystemExit(f"vm-smoke: 127.0.0.1:{port} is in use (another run?)")
        key = self.ssh_key()
        self.serve_repo()
        self.make_vm(key)
        self.record["host"] = {"kernel": os.uname().release, "cpus": os.cpu_count()}
        self.start_vm()
        try:
            boot = self.wait_ssh(boot_timeout)
            self.record["boot_to_ssh_s"] = boot
            self.save()
            if boot is None:
                log(f"no SSH after {boot_timeout} s")
                return 1
            log(f"SSH after {boot} s (cloud-init done)")
            self.observe("first_boot")
            vars_ = ["-e", "nvidia_driver_reboot_timeout=1500"]
            if "check" in steps:
                self.gpuhost("check", "check", "-i", str(HERE / "inventory"), timeout=cli_timeout)
            # `provision --tags host` without the model stage, as both provision steps run it.
            provision = ("provision", "-i", str(HERE / "inventory"), "--tags", "host")
            provision += ("--skip-tags", "model", *vars_)
            if "refuse" in steps:
                self.gpuhost(
                    "provision-no-mok",
                    *provision,
                    timeout=cli_timeout,
                )
            if "mok" in steps:
                mok = self.ssh(
                    "sudo openssl req -new -x509 -nodes -days 36500"
                    " -subj '/CN=gpuhost vm-smoke MOK/'"
                    f" -newkey rsa:2048 -keyout {MOK_KEY} -outform DER -out {MOK_CERT} 2>&1",
                    timeout=300,
                )
                self.record["mok_created_rc"] = mok.returncode
                self.gpuhost(
                    "provision-mok",
                    *provision,
                    "-e",
                    f"nvidia_driver_mok_key={MOK_KEY}",
                    "-e",
                    f"nvidia_driver_mok_cert={MOK_CERT}",
                    timeout=cli_timeout,
                )
            self.observe("after_provision")
            return 0
        finally:
            self.stop_vm()
            self.record["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self.save()
            log(f"record in {self.record_dir}")


DRIVER_TASKS = (
    "Read the driver state",
    "Load the new module",
    "Decide again",
    "Decide how",
    "Reboot to load",
    "Check that the new driver",
    "Stop under Secure Boot",
    "Install the NVIDIA driver packages",
)
KEEP = (
    "driver",
    "secure_boot",
    "packages",
    "gpu_present",
    "installed_module_flavour",
    "holders",
    "rebooted",
    "elapsed",
    "msg",
    "changed",
    "failed",
    "ansible_facts",
)


def driver_events(run: Path) -> list[dict]:
    """role nvidia_driver's probe, modprobe, decision and reboot results of one run, in order."""
    files = run.glob("runner/artifacts/*/job_events/*.json")
    out = []
    for path in sorted(files, key=lambda p: int(p.name.split("-")[0])):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        task = data.get("task", "")
        if event["event"] not in ("runner_on_ok", "runner_on_failed") or not task.startswith(
            DRIVER_TASKS
        ):
            continue
        res = data.get("res", {})
        keep = {k: res[k] for k in KEEP if k in res}
        if "results" in res:
            keep["results"] = [
                {k: r.get(k) for k in ("item", "failed", "msg", "rc")} for r in res["results"]
            ]
        out.append(
            {
                "event": event["event"],
                "task": task,
                "duration_s": round(data.get("duration") or 0, 1),
                "res": keep,
            }
        )
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "vm-smoke")
    parser.add_argument(
        "--ssh-port", type=int, default=int(os.environ.get("VM_SMOKE_SSH_PORT", 2222))
    )
    parser.add_argument(
        "--repo-port", type=int, default=int(os.environ.get("VM_SMOKE_REPO_PORT", 8089))
    )
    parser.add_argument("--memory", type=int, default=1536, help="MiB of guest memory")
    parser.add_argument("--boot-timeout", type=float, default=1800)
    parser.add_argument("--cli-timeout", type=float, default=3600)
    parser.add_argument(
        "--steps", default="check,refuse,mok", help="comma-separated: check,refuse,mok"
    )
    args = parser.parse_args()
    smoke = Smoke(args.cache.resolve(), args.ssh_port, args.repo_port, args.memory)
    return smoke.run(args.boot_timeout, args.cli_timeout, args.steps.split(","))


if __name__ == "__main__":
    sys.exit(main())
