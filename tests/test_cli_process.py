"""gpuhost as a process among others: SIGTERM/SIGHUP stop ansible-playbook and still scrub
the run record, ansible-playbook gets a minimal environment, and one run at a time holds
an inventory. The real console script, ansible-runner and Ansible on a local-connection host.
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
from gpuhost_fakes import cli_env

GPUHOST = Path(sys.executable).parent / "gpuhost"
PLAYBOOKS = Path(__file__).parent / "fixtures" / "playbooks"
HOST = "testhost"
SECRET = "signal-secret-value-0123"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps({"all": {"hosts": {HOST: host}}}), encoding="utf-8")
    return path


def gpuhost_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return cli_env(tmp_path / "runs", **extra)


def processes_running(needle: str) -> list[int]:
    """Pids whose command line names `needle` (ansible-playbook and its forked workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry.name))
    return found


def start_paused_run(tmp_path: Path, inventory: Path) -> tuple[subprocess.Popen, Path]:
    """A real `gpuhost provision` whose playbook (a copy with a unique path) is pausing."""
    playbook = tmp_path / "pause.yml"
    playbook.write_text((PLAYBOOKS / "pause.yml").read_text(encoding="utf-8"), encoding="utf-8")
    proc = subprocess.Popen(
        [
            str(GPUHOST),
            *("provision", "-i", str(inventory), "--playbook", str(playbook)),
            *("-e", f"gpuhost_test_dir={tmp_path}", "-e", f"hf_token={SECRET}"),
        ],
        env=gpuhost_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / f"{HOST}.running").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the paused run did not start: rc={proc.returncode}\n{out}\n{err}")
        time.sleep(0.2)
    return proc, playbook


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_stops_ansible_playbook_and_scrubs_the_record(tmp_path, inventory, signum):
    proc, playbook = start_paused_run(tmp_path, inventory)
    try:
        assert processes_running(str(playbook)), "ansible-playbook should be running now"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err
    deadline = time.monotonic() + 10
    while processes_running(str(playbook)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_running(str(playbook)) == [], "ansible-playbook was left running"
    runs = tmp_path / "runs"
    report = json.loads((runs / "latest" / "report.json").read_text(encoding="utf-8"))
    assert report["status"] == "canceled"
    assert report["error"] == f"stopped by {signal.Signals(signum).name}"
    run_dir = Path(report["run_dir"])
    assert not (run_dir / "runner" / "env" / "extravars").exists()
    for path in runs.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path


def test_a_second_run_on_the_same_inventory_is_refused(tmp_path, inventory):
    proc, _ = start_paused_run(tmp_path, inventory)
    try:
        second = subprocess.run(
            [
                str(GPUHOST),
                "check",
                "-i",
                str(inventory),
                "--playbook",
                str(PLAYBOOKS / "nochange.yml"),
            ],
            env=gpuhost_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        stop(proc)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"another gpuhost run is using host {HOST}: (inventory {inventory}): " in second.stderr
    assert f"pid {proc.pid} on {HOST}:: gpuhost provision" in second.stderr
    assert "gpuhost provision -i" in second.stderr
    assert "hf_token=<redacted>" in second.stderr and SECRET not in second.stderr
    # Only the first run left a record; after it ended the inventory is free again.
    assert len([p for p in (tmp_path / "runs").iterdir() if p.name[0].isdigit()]) == 1
    again = subprocess.run(
        [
            str(GPUHOST),
            "check",
            "-i",
            str(inventory),
            "--playbook",
            str(PLAYBOOKS / "nochange.yml"),
        ],
        env=gpuhost_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stdout + again.stderr


def test_ansible_playbook_gets_a_minimal_environment(tmp_path, inventory):
    # The TLS trust, mirror and proxy variables pass (a Proxmox behind a private CA works as
    # with plain Ansible); cloud credentials do not.
    passed = {
        "REQUESTS_CA_BUNDLE": "/etc/ssl/private-ca.pem",
        "SSL_CERT_DIR": "/etc/ssl/certs",
        "HF_ENDPOINT": "https://hf-mirror.example",
        "https_proxy": "http://proxy.example:3128",
        "NO_PROXY": "localhost",
    }
    names = ["AWS_ACCESS_KEY_ID", "GPUHOST_SGLANG_API_KEY", "HF_TOKEN", "LANG", "HOME", *passed]
    names += ["ANSIBLE_CACHE_PLUGIN", "ANSIBLE_CACHE_PLUGIN_CONNECTION"]
    proc = subprocess.run(
        [
            str(GPUHOST),
            *("provision", "-i", str(inventory), "--playbook", str(PLAYBOOKS / "environment.yml")),
            *(
                "-e",
                f"gpuhost_test_dir={tmp_path}",
                "-e",
                json.dumps({"gpuhost_test_env_names": names}),
            ),
        ],
        env=gpuhost_env(
            tmp_path,
            AWS_ACCESS_KEY_ID="AKIA-not-for-ansible",
            GPUHOST_SGLANG_API_KEY="sk-passed-on-purpose",
            HF_TOKEN="hf-passed-on-purpose",
            LANG="C.UTF-8",
            **passed,
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = dict(
        line.split("=", 1)
        for line in (tmp_path / "environment.txt").read_text().splitlines()
        if "=" in line
    )
    assert seen["AWS_ACCESS_KEY_ID"] == ""
    assert seen["GPUHOST_SGLANG_API_KEY"] == "sk-passed-on-purpose"
    assert seen["HF_TOKEN"] == "hf-passed-on-purpose"
    assert seen["LANG"] == "C.UTF-8" and seen["HOME"] == os.environ["HOME"]
    assert {name: seen[name] for name in passed} == passed
    # The fact cache: ansible.cfg's plugin (not ansible-runner's jsonfile), the run's own folder.
    facts = (tmp_path / "runs" / "latest" / "facts").resolve()
    assert seen["ANSIBLE_CACHE_PLUGIN"] == ""
    assert seen["ANSIBLE_CACHE_PLUGIN_CONNECTION"] == str(facts)
    assert (facts / f"s1_{HOST}").is_file()
    report = json.loads((tmp_path / "runs" / "latest" / "report.json").read_text())
    command = Path(report["artifacts"]) / "ansible" / "command"
    recorded = json.loads(command.read_text())["env"]
    assert "AWS_ACCESS_KEY_ID" not in recorded
    # The secrets reach ansible-playbook through gpuhost's handover, never ansible-runner.
    assert "HF_TOKEN" not in recorded and "GPUHOST_SGLANG_API_KEY" not in recorded
