"""TEST HARNESS for tests/blank/ (inventory and group_vars beside this file): a fresh systemd
container that stands in for a blank GPU VM, reached with the docker connection, with the hf
CLI stand-in (tests/standin/hf_standin.py, a test double) installed as /usr/local/bin/hf-standin
and the stand-in NVIDIA apt repository (molecule/nvidia/standin_repo.py, a test double) at
/srv/nvidia-standin, so the driver and CUDA stages take their real path.

Used by bench/blank_to_serving.py and tests/blank/test_interrupt_rerun.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "tests" / "blank"
NAME = os.environ.get("GPUHOST_BLANK_NAME") or "gpuhost-blank-sandbox"
IMAGE = os.environ.get("GPUHOST_BLANK_IMAGE", "gpuhost/debian:12")
STANDIN_LOG = "/var/cache/gpuhost/huggingface/hf-standin.log"
UNIT = "gpuhost-model-download.service"
STANDIN_REPO = ROOT / ".cache" / "blank" / "standin-repo"
STANDIN_KEY = ROOT / ".cache" / "blank" / "standin-key.asc"


def sh(*argv: str, check: bool = True) -> str:
    return subprocess.run(argv, check=check, capture_output=True, text=True).stdout


def exec_(*argv: str, check: bool = False) -> str:
    return sh("docker", "exec", NAME, *argv, check=check)


def standin_repo() -> Path:
    """The stand-in NVIDIA repository, built once (a few seconds) and kept under .cache/."""
    if not (STANDIN_REPO / "pins.json").is_file():
        sh(
            "python3", str(ROOT / "molecule/nvidia/standin_repo.py"),
            str(STANDIN_REPO), str(STANDIN_KEY),
        )  # fmt: skip
    return STANDIN_REPO


def start(name: str, image: str) -> None:
    """A new container `name` (any old one removed) with systemd as PID 1, in the shape a
    systemd container needs on these machines, once systemd has settled (also used by
    bench/noop_converge.py)."""
    sh("docker", "rm", "-f", name, check=False)
    sh(
        "docker", "run", "-d", "--name", name, "--hostname", name,
        # NET_ADMIN: the server's nftables port rule, in the container's own network.
        "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cgroupns", "host",
        "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
        image, "/lib/systemd/systemd",
    )  # fmt: skip
    for _ in range(60):
        state = sh("docker", "exec", name, "systemctl", "is-system-running", "--wait", check=False)
        if state.strip() in ("running", "degraded"):
            return
        time.sleep(1)


def standin_doubles(inventory: Path | str, *extra: str) -> None:
    """The test doubles where a GPU host has the real things (tests/standin/
    prepare_sglang_host.yml): the stand-in `sglang` package in the venv the server unit runs,
    the NVIDIA device nodes, and an nvidia-smi replaying a recorded 8x RTX PRO 6000 host.
    `inventory`: an inventory path, or "<container>," with extra `-e` for its connection."""
    playbook = Path(sys.executable).parent / "ansible-playbook"
    subprocess.run(
        [
            str(playbook) if playbook.exists() else "ansible-playbook",
            "-i", str(inventory), str(ROOT / "tests/standin/prepare_sglang_host.yml"),
            "-e", "standin_nvidia_smi_fixture=rtx-pro-6000x8-proxmox-p2p-ns",
            "-e", "standin_hf_cli=true", *extra,
        ],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip


def fresh() -> None:
    """A new blank container: systemd as PID 1, nothing of gpuhost on it."""
    repo = standin_repo()
    start(NAME, IMAGE)
    sh(
        "docker",
        "cp",
        str(ROOT / "tests/standin/hf_standin.py"),
        f"{NAME}:/usr/local/bin/hf-standin",
    )
    exec_("chmod", "0755", "/usr/local/bin/hf-standin", check=True)
    sh("docker", "cp", f"{repo}/.", f"{NAME}:/srv/nvidia-standin")
    standin_doubles(INVENTORY)


def exists(path: str) -> bool:
    return subprocess.run(["docker", "exec", NAME, "test", "-e", path], check=False).returncode == 0


def remove() -> None:
    sh("docker", "rm", "-f", NAME, check=False)


def provision_cmd(runs_dir: Path, *extra: str) -> list[str]:
    gpuhost = ROOT / ".venv" / "bin" / "gpuhost"
    # --project-dir: this checkout's playbooks and roles, whichever checkout the venv's
    # editable install points at.
    return [
        str(gpuhost), "--project-dir", str(ROOT), "--runs-dir", str(runs_dir),
        "provision", "-i", str(INVENTORY), *extra,
    ]  # fmt: skip


def env(**download) -> dict:
    """The stand-in hub's size and rate, read by tests/blank/group_vars/gpu_hosts.yml."""
    out = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
    }
    # GPUHOST_*: the CLI hands ansible-playbook only the variables it keeps
    # (src/gpuhost/environment.py); another name would silently fall back to the defaults.
    out.update({f"GPUHOST_BLANK_{k.upper()}": str(v) for k, v in download.items()})
    return out


def provision(runs_dir: Path, *extra: str, **download) -> dict:
    """One `gpuhost provision` run; its report.json."""
    proc = subprocess.run(
        provision_cmd(runs_dir, *extra, "--json"),
        env=env(**download), capture_output=True, text=True, check=False,
    )  # fmt: skip
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(
            f"gpuhost provision gave no report (rc {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        ) from None


def standin_log() -> list[dict]:
    """What the hf stand-in wrote, one line per MiB and one at the end of each process."""
    return [json.loads(line) for line in exec_("cat", STANDIN_LOG).splitlines() if line.strip()]


def downloaded_mib() -> float:
    """MiB under the model's repo dir in the cache now."""
    out = exec_("du", "-s", "--apparent-size", "-B1", "/var/cache/gpuhost/huggingface/hub")
    return int(out.split()[0]) / (1 << 20) if out.strip() else 0.0


def interrupt(proc: subprocess.Popen, timeout: float = 120) -> int:
    """Ctrl-C to the CLI, as a person would; its exit code."""
    proc.send_signal(signal.SIGINT)
    return proc.wait(timeout=timeout)
