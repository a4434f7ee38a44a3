"""`gpuhost doctor` end to end on this machine (no GPU, no server): the real console script,
ansible-runner and playbooks/doctor.yml over a local connection, run records in tmp_path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpuhost_fakes import cli_env

GPUHOST = Path(sys.executable).parent / "gpuhost"


def doctor(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": {"h": host}}}}}))
    env = cli_env(tmp_path / "runs", COLUMNS="300")
    cmd = [str(GPUHOST), "doctor", "-i", str(inventory), "-e", "ansible_become=false",
           "-e", f"gpuhost_cache_dir={tmp_path}", *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, check=False)
    assert "Traceback" not in proc.stdout + proc.stderr
    report = json.loads((tmp_path / "runs" / "latest" / "report.json").read_text())
    return proc, report


def test_doctor_without_gpu_says_so_and_changes_nothing(tmp_path):
    proc, report = doctor(tmp_path, "-e", "doctor_disk_warn_gib=0", "-e", "doctor_disk_fail_gib=0")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert report["command"] == "doctor" and report["check"] is True
    found = {f["check"]: f["status"] for f in report["findings"]["h"]}
    assert found == {"doctor.gpu": "warn", "doctor.server": "warn", "doctor.disk": "pass"}
    assert "WARN  h  doctor.gpu: no NVIDIA GPU visible" in proc.stdout
    assert "GPU checks skipped" in proc.stdout
    assert "| WARN | doctor.gpu |" in Path(report["report_md"]).read_text()


def test_doctor_exits_1_on_a_fail_with_its_fix(tmp_path):
    proc, report = doctor(tmp_path, "-e", "doctor_disk_fail_gib=1000000",
                          "-e", "doctor_disk_warn_gib=1000000")  # fmt: skip
    assert proc.returncode == 1
    assert report["status"] == "failed"
    line = next(x for x in proc.stdout.splitlines() if x.startswith("FAIL"))
    assert "doctor.disk" in line and "below 1000000 GiB" in line and "fix: free space" in line
