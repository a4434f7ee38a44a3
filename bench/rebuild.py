#!/usr/bin/env python3
# Copyright: gpuhost contributors
# Apache-2.0
"""Rebuild a GPU VM from scratch twice against the Proxmox API stand-in and time it.

    .venv/bin/python bench/rebuild.py --start-containers [--api-port 18630] [--ssh-port 18631]
        [--out FILE.json]

The stand-in (tests/proxmox_standin, a test double of the Proxmox API; its VMs are real
systemd containers reached over SSH) holds one template and no VM. Run 1 is `gpuhost
rebuild` of a VM that does not exist yet (create, site.yml, verify: the model is downloaded
from the hub stand-in onto the model disk). Runs 2 and 3 rebuild it again. For each run it
prints the wall time of every stage (from the run record's stage_times) and, as the
reference measured in the same run, the bytes written to the model disk by the run: the
first run writes the model, a rebuild writes 0 and leaves every file on the disk identical
(size, mtime and sha256).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The one helper that finds the project's tools, loaded by its path (no sys.path edits).
_spec = importlib.util.spec_from_file_location("project_tools", ROOT / "scripts/project_tools.py")
project_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(project_tools)

SCRIPT = "bench/rebuild.py"
CONTAINERS = "the Proxmox API stand-in's VM, a systemd container reached over SSH"


def rebuild(bed, vm):
    started = time.monotonic()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "gpuhost"), "--project-dir", str(ROOT), "rebuild",
         "-i", str(bed.inventory), "-l", vm, "--yes", "--json"],
        capture_output=True, text=True, env=bed.env(), timeout=3600,
    )  # fmt: skip
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"gpuhost rebuild failed (rc {proc.returncode})")
    report = json.loads(Path(bed.dir / "runs" / "latest" / "report.json").read_text())
    return wall, report


def written(before, after):
    """Bytes of files that are new or changed on the model disk."""
    return sum(meta[0] for path, meta in after.items() if before.get(path) != meta)


def _bed():
    """tests/proxmox_standin/rebuild_env.py, loaded by its path."""
    path = ROOT / "tests" / "proxmox_standin" / "rebuild_env.py"
    spec = importlib.util.spec_from_file_location("proxmox_standin.rebuild_env", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main():
    # The VMs are containers of the base image (tests/proxmox_standin/vm_containers.py).
    project_tools.setup(SCRIPT, ["gpuhost", "docker-daemon", "image:gpuhost/debian:12"])
    project_tools.setup_check_done(SCRIPT)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-port", type=int, default=18630)
    parser.add_argument("--ssh-port", type=int, default=18631)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out")
    project_tools.add_start_flag(parser, CONTAINERS)
    args = parser.parse_args()
    project_tools.confirm_containers(SCRIPT, args.start_containers, CONTAINERS)
    env = _bed()
    results = []
    with env.RebuildBed(args.api_port, args.ssh_port) as bed:
        disk = {}
        for n in range(1, args.runs + 1):
            wall, report = rebuild(bed, env.VM)
            now = bed.model_disk()
            result = {
                "run": n,
                "status": report["status"],
                "wall_s": round(wall, 1),
                "stage_times": report.get("stage_times", []),
                "model_disk_files": len(now),
                "model_disk_bytes": sum(m[0] for m in now.values()),
                "bytes_written_to_model_disk": written(disk, now),
                "model_disk_identical_to_previous": n > 1 and now == disk,
            }
            disk = now
            results.append(result)
            print(f"run {n}: {report['status']}, {wall:.1f} s")
            for stage in result["stage_times"]:
                print(f"  {stage['stage']:<22} {stage['seconds']:>7.1f} s")
            print(
                f"  model disk: {result['model_disk_files']} files, "
                f"{result['model_disk_bytes']} bytes; written by this run: "
                f"{result['bytes_written_to_model_disk']} bytes"
                + (
                    f"; identical to the previous run: {result['model_disk_identical_to_previous']}"
                    if n > 1
                    else ""
                )
            )
        bad = [api for api in bed.api.log if api["status"] != 200]
        print(f"API requests: {len(bed.api.log)}, refused: {len(bad)}")
    first = results[0]["bytes_written_to_model_disk"]
    for r in results[1:]:
        ratio = r["bytes_written_to_model_disk"] / first if first else float("nan")
        print(f"run {r['run']}: bytes written / first build's = {ratio:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
