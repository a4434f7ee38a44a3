#!/usr/bin/env python3
"""Blank sandbox to verified (stand-in) server, with the model download overlapped and not.

Twice in one run, each on a fresh blank systemd container (tests/blank/, reached with the
docker connection), the real site.yml through `gpuhost provision`, the same stand-in hub
(tests/standin/hf_standin.py, a test double writing FILES x FILE_MIB at RATE_MIB MiB/s):

  1. model_cache_overlap=true: the download starts right after preflight and base;
  2. model_cache_overlap=false: the sequential order, the download starts in the serve stage.

Prints both totals, the stage times, the longest single chain of the overlapped run -
max(download, install chain) + server start + verify, measured in that run - and the
ratios. Target: overlapped total <= 1.1 x that chain. Not part of `make test` (minutes).

    .venv/bin/python bench/blank_to_serving.py --start-containers [--files 4] [--file-mib 48]

It checks what it needs first (the venv, the docker daemon, the base image, the tools that
build the stand-in repository; scripts/project_tools.py) and says in one line what to run;
it starts its containers only with --start-containers (or "y" at the prompt on a terminal).
GPUHOST_SETUP_CHECK=1 stops after the setup check.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The one helper that finds the project's tools, loaded by its path.
_spec = importlib.util.spec_from_file_location("project_tools", REPO / "scripts/project_tools.py")
project_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(project_tools)

SCRIPT = "bench/blank_to_serving.py"
TARGET = 1.1
WHAT = "two blank systemd sandboxes, one after the other"
# The stand-in NVIDIA repository's builder needs these (molecule/nvidia/standin_repo.py),
# unless a built one is kept under .cache/.
REPO_TOOLS = ["dpkg-deb", "dpkg-scanpackages", "gpg"]


def load_sandbox():
    """tests/blank/sandbox.py (the harness that starts the blank containers), by its path."""
    spec = importlib.util.spec_from_file_location("sandbox", REPO / "tests/blank/sandbox.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def requirements(box) -> list[str]:
    """What the runs need beyond the venv: the daemon, the sandbox image and (when no built
    stand-in repository is kept) its builder's tools."""
    needs = ["docker-daemon", f"image:{box.IMAGE}"]
    if not (box.STANDIN_REPO / "pins.json").is_file():
        needs += REPO_TOOLS
    return needs


def one(box, runs: Path, overlap: bool, download: dict) -> dict:
    box.fresh()
    try:
        report = box.provision(runs, "-e", json.dumps({"model_cache_overlap": overlap}), **download)
    finally:
        box.remove()
    if report.get("status") != "successful":
        sys.exit(
            f"overlap={overlap}: the run did not succeed: {report.get('status')} "
            f"{report.get('error')} {report.get('failed_tasks')}"
        )
    return report


def show(label: str, report: dict) -> None:
    stages = ", ".join(
        f"{s['name']} {s['start_s']:.0f}-{s['end_s']:.0f}s" for s in report["stages"]
    )
    print(f"{label}: total {report['duration_s']:.1f} s; {stages}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mib", type=int, default=48)
    parser.add_argument("--rate-mib", type=float, default=4.0)
    parser.add_argument("--runs-dir", default="")
    parser.add_argument("--json", default="", help="also write the numbers here")
    project_tools.add_start_flag(parser, WHAT)
    args = parser.parse_args()
    # The venv first (a fresh clone: `make venv`), then docker, the image and the tools.
    project_tools.setup(SCRIPT, ["gpuhost", "ansible-playbook"])
    box = load_sandbox()
    project_tools.setup(SCRIPT, requirements(box))
    project_tools.setup_check_done(SCRIPT)
    project_tools.confirm_containers(SCRIPT, args.start_containers, WHAT)
    download = {"files": args.files, "file_mib": args.file_mib, "rate_mib": args.rate_mib}
    runs = Path(args.runs_dir or tempfile.mkdtemp(prefix="gpuhost-blank-bench-"))
    print(
        f"stand-in hub: {args.files} x {args.file_mib} MiB at {args.rate_mib} MiB/s; "
        f"run records in {runs}",
        flush=True,
    )

    on = one(box, runs, True, download)
    show("overlap on ", on)
    off = one(box, runs, False, download)
    show("overlap off", off)

    chain = on["stages_summary"]
    reference = chain["longest_chain_s"]
    ratio = on["duration_s"] / reference
    print()
    print(
        f"longest chain (overlap run): max(download {chain['download_s']} s, install chain "
        f"{chain['install_chain_s']} s) + server start and verify {chain['server_and_verify_s']} s "
        f"= {reference} s"
    )
    print(
        f"total overlap on  {on['duration_s']:.1f} s = {ratio:.3f} x the longest chain "
        f"(target <= {TARGET})"
    )
    print(
        f"total overlap off {off['duration_s']:.1f} s = {off['duration_s'] / reference:.3f} x; "
        f"off / on = {off['duration_s'] / on['duration_s']:.3f}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "download": download,
                    "on": {
                        "duration_s": on["duration_s"],
                        "stages": on["stages"],
                        "summary": chain,
                    },
                    "off": {
                        "duration_s": off["duration_s"],
                        "stages": off["stages"],
                        "summary": off["stages_summary"],
                    },
                    "ratio_vs_longest_chain": round(ratio, 3),
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
