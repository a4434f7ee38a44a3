"""End to end on a blank systemd container (tests/blank/sandbox.py), the real site.yml:
Ctrl-C to `gpuhost provision` during the model download, then re-runs. One download, resumed,
nothing fetched twice; the second converge changes nothing.

  1. provision; Ctrl-C while the background download is under way -> the CLI exits 130,
     the download unit keeps running (it belongs to the host's systemd, not the controller);
  2. provision again -> it finds the running unit and follows it (no second download
     process); the unit is killed mid-way (a crash, a host reboot) -> this run's serve stage
     restarts it, or, when it was already waiting, fails saying the next run resumes it and
  3. provision again does; either way the stand-in resumes its *.incomplete files: every
     MiB is written exactly once over all processes, the server is verified;
  4. provision again -> changed=0.
The driver and CUDA install from the stand-in NVIDIA repository; the driver's activation is
recorded as "reboot needed" (a container's kernel is the host's).

Minutes long, so opt-in: GPUHOST_E2E=1 .venv/bin/pytest -q -p no:cacheprovider tests/blank
(the hub is its stand-in, tests/standin/hf_standin.py, a test double).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sandbox

pytestmark = pytest.mark.skipif(
    os.environ.get("GPUHOST_E2E") != "1", reason="end-to-end, minutes: set GPUHOST_E2E=1"
)
TOKEN = "hf_blankTestToken0123456789"  # tests/blank/group_vars/gpu_hosts.yml
FILES, FILE_MIB, RATE = 3, 64, 2.0  # 192 MiB at 2 MiB/s: ~96 s of download


def _wait_for(predicate, timeout: float, what: str, proc=None) -> None:
    """Wait for predicate; fail at once when the provision run `proc` has ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the provision run ended (exit {proc.returncode}) before {what}")
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


def _unit_state() -> str:
    return sandbox.exec_("systemctl", "is-active", sandbox.UNIT).strip()


def test_interrupt_and_rerun_download_once(tmp_path):
    download = {"files": FILES, "file_mib": FILE_MIB, "rate_mib": RATE}
    total = FILES * FILE_MIB
    sandbox.fresh()
    try:
        # 1. Ctrl-C during the download; at -vvv, so that a token in a task's arguments,
        # environment or result would land in the run record (checked at the end).
        proc = subprocess.Popen(
            [*sandbox.provision_cmd(tmp_path), "-vvv"], env=sandbox.env(**download),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_for(lambda: sandbox.downloaded_mib() > 16, 1800, "the download to start", proc)
        assert sandbox.interrupt(proc, timeout=300) == 130
        assert _unit_state() == "active", "the download must outlive the controller's Ctrl-C"
        first_pid = {line["pid"] for line in sandbox.standin_log()}
        assert len(first_pid) == 1
        # The token reached the downloader as its stdin (a root-owned file PID 1 opened, gone
        # once the unit started), never in argv or the unit's env; the service account
        # cannot read it out of the running downloader (non-dumpable: /proc/PID/* is root's).
        seen = sandbox.exec_("systemctl", "show", sandbox.UNIT) + sandbox.exec_(
            "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
        )
        assert TOKEN not in seen
        assert "StandardInput=file" in seen and "HF_TOKEN_PATH" not in seen
        assert not sandbox.exists("/etc/gpuhost/hf-token"), "the token file outlived the start"
        pid = sandbox.exec_("systemctl", "show", "-p", "MainPID", "--value", sandbox.UNIT).strip()
        probe = f"cat /proc/{pid}/environ /proc/{pid}/root/proc/{pid}/environ 2>&1; true"
        as_user = sandbox.exec_("runuser", "-u", "gpuhost", "--", "sh", "-c", probe)
        assert TOKEN not in as_user and "Permission denied" in as_user, as_user

        # 2. Re-run: it follows the running unit (no second process); the unit then dies
        # mid-way (a crash, a host reboot). If this run is still installing, its serve stage
        # restarts the unit; if it is already waiting, it fails saying the next run resumes.
        proc = subprocess.Popen(
            [*sandbox.provision_cmd(tmp_path), "--json"], env=sandbox.env(**download),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        _wait_for(lambda: sandbox.downloaded_mib() > total * 0.6, 1800, "60% downloaded", proc)
        assert {line["pid"] for line in sandbox.standin_log()} == first_pid, "a second download"
        sandbox.exec_("systemctl", "kill", "--signal=SIGKILL", sandbox.UNIT, check=True)
        out, _ = proc.communicate(timeout=2400)
        report = json.loads(out)
        if report["status"] != "successful":
            assert "it resumes on the next run" in out, report.get("failed_tasks")
            # 3. Re-run: resumes, finishes, serves.
            report = sandbox.provision(tmp_path, **download)
        assert report["status"] == "successful", report.get("failed_tasks")
        log = sandbox.standin_log()
        pids = list(dict.fromkeys(line["pid"] for line in log))
        assert len(pids) == 2, log
        last = {pid: [x for x in log if x["pid"] == pid][-1] for pid in pids}
        assert last[pids[1]]["done"] and last[pids[1]]["resumed_from_mib"] > 0
        # Every MiB once: what the first process wrote plus what the second wrote is the model
        # (config.json is a few bytes).
        # A process killed mid-way logged its last whole MiB: it under-reports by < 1 MiB.
        written = sum(x["written_mib"] for x in last.values())
        assert total - 1.01 <= written <= total + 0.01, (written, total, last)
        assert all(x["token_seen"] for x in log), "the token reaches the downloader by file"
        assert not sandbox.exists("/etc/gpuhost/hf-token"), "the token outlived the download"
        stages = [s["name"] for s in report["stages"]]
        assert "download" in stages and "verify" in stages
        # The driver came from the stand-in repository; a container cannot load or reboot into
        # it: the run says so, with the reason, instead of failing or rebooting.
        act = report["driver_activation"]["gpuhost-blank-sandbox"]
        assert act["outcome"] == "reboot needed" and "container" in act["reason"], act
        assert sandbox.exec_("dpkg-query", "-W", "-f=${Version}", "nvidia-open").startswith("580.")

        # 4. Nothing left to do.
        again = sandbox.provision(tmp_path, **download)
        assert again["status"] == "successful"
        assert all(h["changed"] == 0 for h in again["hosts"].values()), again["changed_tasks"]

        # The token and the server's admin key (generated on the host, kept in its root-only
        # keys file) are in no run record (the -vvv one included) and not in the journal.
        keys_file = "/etc/gpuhost/sglang-server.keys"
        admin = sandbox.exec_("sed", "-n", "s/^admin_api_key=//p", keys_file).strip()
        assert len(admin) >= 40, "no admin key on the host"
        assert any(tmp_path.rglob("*")), "no run record to search"
        journal = sandbox.exec_("journalctl", "--no-pager", "-o", "cat")
        for secret in (TOKEN, admin):
            leaked = [
                str(p) for p in tmp_path.rglob("*")
                if p.is_file() and secret.encode() in p.read_bytes()
            ]  # fmt: skip
            assert not leaked, leaked
            assert secret not in journal
    finally:
        if os.environ.get("GPUHOST_BLANK_KEEP") != "1":
            sandbox.remove()
