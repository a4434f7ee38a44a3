"""`gpuhost rebuild` / `gpuhost vm`: VM selection, the confirmation, stage times (the full
rebuild against the Proxmox stand-in is tests/test_proxmox_rebuild.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from gpuhost.commands.rebuild import add_arguments, confirmation_text, select_vms, stage_times

STAGE_CHECK = "Check the Proxmox node's passthrough setup (read-only, as root on the node)"
STAGE_SPEC = "Check the VM spec against Proxmox and the cluster before anything changes"

ROOT = Path(__file__).resolve().parents[1]
GPUHOST = str(Path(sys.executable).parent / "gpuhost")


def _inventory(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        json.dumps(
            {
                "proxmox_vms": {"hosts": {"gpu-vm1": {}, "gpu-vm2": {}}},
                "gpu_hosts": {"hosts": {"gpu-vm1": {}, "bare1": {}}},
            }
        )
    )
    return inv


def test_select_vms_keeps_to_group_proxmox_vms(tmp_path):
    inv = _inventory(tmp_path)
    assert select_vms([inv], "all") == ["gpu-vm1", "gpu-vm2"]
    assert select_vms([inv], "gpu-vm2") == ["gpu-vm2"]
    assert select_vms([inv], "bare1") == []


def _gpuhost(tmp_path, *args):
    env = dict(os.environ, GPUHOST_RUNS_DIR=str(tmp_path / "runs"))
    return subprocess.run(
        [GPUHOST, "--project-dir", str(ROOT), *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_rebuild_without_yes_and_without_a_terminal_does_nothing(tmp_path):
    proc = _gpuhost(tmp_path, "rebuild", "-i", str(_inventory(tmp_path)), "-l", "gpu-vm1")
    assert proc.returncode == 2
    assert "needs confirmation: pass --yes" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_rebuild_of_a_host_that_is_no_vm_is_refused(tmp_path):
    proc = _gpuhost(tmp_path, "rebuild", "-i", str(_inventory(tmp_path)), "-l", "bare1", "--yes")
    assert proc.returncode == 2
    assert "no host of group proxmox_vms matches --limit bare1" in proc.stderr


def test_vm_destroy_asks_too(tmp_path):
    inv = str(_inventory(tmp_path))
    proc = _gpuhost(tmp_path, "vm", "destroy", "-i", inv, "-l", "gpu-vm2")
    assert proc.returncode == 2 and "needs confirmation" in proc.stderr


def _event(counter, kind, when, task="", play=""):
    return {
        "counter": counter,
        "event": kind,
        "created": f"2026-12-01T10:00:{when:02d}.000000+00:00",
        "event_data": {"task": task, "play": play},
    }


def test_stage_times_from_job_events(tmp_path):
    events = tmp_path / "artifacts" / "gpuhost" / "job_events"
    events.mkdir(parents=True)
    stream = [
        _event(1, "playbook_on_play_start", 0, play="Rebuild the GPU VMs on Proxmox"),
        _event(2, "playbook_on_task_start", 0, task=STAGE_SPEC),
        _event(3, "playbook_on_task_start", 1, task="Reach the Proxmox node over SSH"),
        _event(4, "playbook_on_task_start", 1, task=STAGE_CHECK),
        _event(5, "playbook_on_task_start", 3, task="Destroy the VM, keeping its model disk"),
        _event(6, "playbook_on_task_start", 10, task="Create and boot the VM"),
        _event(7, "playbook_on_task_start", 30, task="Wait for SSH on the new VM"),
        _event(8, "playbook_on_play_start", 32, play="Preflight"),
        _event(9, "playbook_on_play_start", 40, play="Verify the SGLang server"),
        _event(10, "playbook_on_stats", 45),
    ]
    for event in stream:
        (events / f"{event['counter']}.json").write_text(json.dumps(event))
    assert stage_times(tmp_path / "artifacts") == [
        {"stage": "spec checks", "seconds": 1.0},
        {"stage": "node reachable", "seconds": 0.0},
        {"stage": "host checks", "seconds": 2.0},
        {"stage": "destroy", "seconds": 7.0},
        {"stage": "create + boot", "seconds": 20.0},
        {"stage": "wait for SSH", "seconds": 2.0},
        {"stage": "site: preflight", "seconds": 8.0},
        {"stage": "site: verify", "seconds": 5.0},
    ]


def test_stage_names_are_the_playbooks_task_names():
    """Each stage start is a task or play name in rebuild.yml or a playbook it imports."""
    from gpuhost.commands.rebuild import _STAGE_STARTS

    text = "".join(p.read_text() for p in (ROOT / "playbooks").glob("*.yml"))
    for stage, start in _STAGE_STARTS:
        assert f"name: {start}" in text, (stage, start)


def test_rebuild_delete_model_disk_sets_the_variable_and_says_so():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["-i", "inv", "-l", "gpu-vm1", "--delete-model-disk"])
    assert args.delete_model_disk is True
    assert parser.parse_args(["-i", "inv", "-l", "gpu-vm1"]).delete_model_disk is False
    kept = confirmation_text("rebuild", ["gpu-vm1"], False)
    gone = confirmation_text("rebuild", ["gpu-vm1"], True)
    assert "model disk is kept" in kept and "destroyed" not in kept
    assert "model disk is destroyed too" in gone and "kept" not in gone
    assert "model disk" in confirmation_text("destroy", ["gpu-vm1"], True)


def test_rebuild_delete_model_disk_reaches_the_playbook(tmp_path, monkeypatch):
    """--delete-model-disk becomes proxmox_vm_destroy_model_disk=true for rebuild.yml; without
    it the variable is not set (the role's default keeps the disk)."""
    import gpuhost.commands.rebuild as rebuild

    seen = []

    def fake_run_one(ctx, args, playbook, command, host, extra, files):
        seen.append((playbook, host, dict(extra)))
        raise SystemExit(0)

    monkeypatch.setattr(rebuild, "_run_one", fake_run_one)
    inv = _inventory(tmp_path)
    for flag in ([], ["--delete-model-disk"]):
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args(["-i", str(inv), "-l", "gpu-vm1", "--yes", *flag])
        with contextlib.suppress(SystemExit):
            rebuild.run(args, ctx=None)
    assert seen[0] == ("playbooks/rebuild.yml", "gpu-vm1", {})
    assert seen[1] == ("playbooks/rebuild.yml", "gpu-vm1", {"proxmox_vm_destroy_model_disk": True})


def test_rebuild_without_yes_names_the_model_disk_with_delete_model_disk(tmp_path):
    proc = _gpuhost(
        tmp_path, "rebuild", "-i", str(_inventory(tmp_path)), "-l", "gpu-vm1",
        "--delete-model-disk",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "gpu-vm1 and its model disk needs confirmation: pass --yes" in proc.stderr
