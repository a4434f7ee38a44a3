"""`gpuhost rebuild` end to end against the Proxmox API stand-in (a test double) whose VMs
are real systemd containers: from no VM to a verified server, then a rebuild that destroys
the VM, keeps the model disk and brings it back verified, with nothing downloaded again.

It takes two full site.yml runs over SSH (~6 min on a 2-core machine), so it runs when
GPUHOST_REBUILD_E2E=1 (`make rebuild-e2e`, part of `make test`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    os.environ.get("GPUHOST_REBUILD_E2E") != "1" or not shutil.which("docker"),
    reason="end-to-end rebuild: set GPUHOST_REBUILD_E2E=1 (make rebuild-e2e), needs docker",
)


HUB_TOKEN = "hf_rebuildTestToken0123456789"  # tests/proxmox_standin/rebuild_env.py
HF_LOG = "/var/cache/gpuhost/huggingface/hf-standin.log"  # the model disk; RebuildBed


def _rebuild(bed, *extra):
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "gpuhost"), "--project-dir", str(ROOT), "rebuild",
         "-i", str(bed.inventory), "-l", "gpu-vm1", "--yes", "--json", *extra],
        capture_output=True, text=True, env=bed.env(), timeout=3000,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return json.loads((bed.dir / "runs" / "latest" / "report.json").read_text())


def test_rebuild_from_nothing_then_again_keeping_the_model_disk(tmp_path):
    from proxmox_standin.rebuild_env import RebuildBed

    with RebuildBed(18612, 18623, tmp_path, prefix="gpuhost-rebuild-e2e") as bed:
        # -vvv: a token in a task's arguments, environment or result would land in the record
        first = _rebuild(bed, "-vvv")
        assert first["status"] == "successful"
        # Over SSH with sudo, as on a real VM: the hub token reached the downloader (the
        # stand-in refuses to download without it) through the 0600 file, not through sudo's
        # command line or environment: sudo logs each command it runs to the journal, and
        # the hub token is in none of those lines nor anywhere else in the journal.
        runs = [json.loads(x) for x in bed.vm_exec("cat", HF_LOG).splitlines() if x.strip()]
        assert runs and all(x["token_seen"] for x in runs), runs
        journal = bed.vm_exec("journalctl", "--no-pager", "-o", "cat")
        assert [x for x in journal.splitlines() if "COMMAND=" in x], "sudo logged nothing"
        assert HUB_TOKEN not in journal
        assert HUB_TOKEN not in bed.vm_exec("sh", "-c", "cat /var/log/auth.log 2>/dev/null; :")
        stages = [s["stage"] for s in first["stage_times"]]
        assert {"destroy", "create + boot", "wait for SSH", "site: verify"} <= set(stages)
        disk = bed.model_disk()
        assert any(path.startswith("hub/") for path in disk), disk
        container = bed.vms.container(201)
        old_id = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", container], capture_output=True, text=True
        ).stdout

        second = _rebuild(bed)
        assert second["status"] == "successful"
        assert [s["stage"] for s in second["stage_times"]] == stages
        # a new VM (container), the same model disk, byte for byte, nothing re-downloaded
        new_id = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", container], capture_output=True, text=True
        ).stdout
        assert new_id != old_id
        assert bed.model_disk() == disk
        # every Proxmox request the project made passed the schema and permission checks
        assert [e for e in bed.api.log if e["status"] != 200] == []
        # neither the Proxmox token secret nor the hub token is in any run record, artifact
        # or fact cache (the -vvv run included)
        for path in (bed.dir / "runs").rglob("*"):
            if path.is_file():
                text = path.read_text(errors="replace")
                assert bed.secret not in text, path
                assert HUB_TOKEN not in text, path
