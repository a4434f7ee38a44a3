"""Secrets never reach a run record (issue 28 items 5 and 8): not ansible-runner's `command`
artifact or env/, not for a moment (a playbook task looks while the run is going, and a
SIGKILL of gpuhost leaves what was written), and a secret-named value of the server env
(a WANDB_API_KEY in sglang_server_extra_env or a profile's env) is redacted in the facts,
job events, stdout and report.json. The real console script, ansible-runner and Ansible on a
local-connection host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

GPUHOST = Path(sys.executable).parent / "gpuhost"
PLAYBOOK = Path(__file__).parent / "fixtures" / "playbooks" / "record_secrets.yml"
HOST = "secretshost"
API_KEY = "sk-api-key-for-the-test-0123456789"
HF = "hf_hub_token_for_the_test_0123456789"
EXTRA = "extra-var-secret-0123456789"
WANDB = "wandb-value-for-the-test-0123456789"


def files_with(root: Path, needles: list[str]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path}: {n}" for n in needles if n in text]
    return found


def start(tmp_path: Path, pause: int, *extra: str) -> subprocess.Popen:
    playbook = tmp_path / "record_secrets.yml"  # a unique path: its processes can be found
    playbook.write_text(PLAYBOOK.read_text(encoding="utf-8"), encoding="utf-8")
    inventory = tmp_path / "hosts.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: host}}}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUHOST_")}
    env.update(
        GPUHOST_RUNS_DIR=str(tmp_path / "runs"),
        GPUHOST_LOCK_DIR=str(tmp_path / "locks"),
        GPUHOST_SGLANG_API_KEY=API_KEY,
        HF_TOKEN=HF,
        COLUMNS="200",
    )
    variables = {
        "record_secrets_dir": str(tmp_path),
        "record_secrets_runs": str(tmp_path / "runs"),
        "record_secrets_pause": pause,
        "record_secrets_wandb": WANDB,
    }
    argv = [str(GPUHOST), *extra, "-i", str(inventory), "--playbook", str(playbook)]
    argv += ["-e", json.dumps(variables), "-e", f"hf_token={EXTRA}"]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def pids_running(needle: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmdline:
                found.append(int(entry.name))
    return found


def test_a_finished_run_records_no_secret(tmp_path):
    proc = start(tmp_path, 0, "check")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    # While the playbook ran, no file under the runs directory held a secret.
    assert (tmp_path / "found.txt").read_text() == ""
    runs = tmp_path / "runs"
    assert files_with(runs, [API_KEY, HF, EXTRA, WANDB]) == []
    report = json.loads((runs / "latest" / "report.json").read_text())
    # The diff of the rendered file is kept, its secret value is not.
    diffs = "".join(c["diff"] or "" for c in report["changed_tasks"])
    assert "WANDB_API_KEY=<redacted>" in diffs
    artifacts = Path(report["artifacts"]) / "ansible"
    recorded = json.loads((artifacts / "command").read_text())
    assert "HF_TOKEN" not in recorded["env"] and "GPUHOST_SGLANG_API_KEY" not in recorded["env"]
    assert EXTRA not in " ".join(recorded["command"])


def test_a_sigkilled_run_leaves_no_secret(tmp_path):
    proc = start(tmp_path, 300, "provision")
    deadline = time.monotonic() + 120
    try:
        while not (tmp_path / f"{HOST}.running").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the run did not start: " + "".join(proc.communicate()))
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        for pid in pids_running(str(tmp_path / "record_secrets.yml")):
            os.kill(pid, signal.SIGKILL)  # the orphaned ansible-playbook this test started
    assert (tmp_path / "found.txt").read_text() == ""
    # Nothing scrubbed after the kill: what the run wrote holds none of the secrets it got.
    assert files_with(tmp_path / "runs", [API_KEY, HF, EXTRA]) == []
