"""Module nvidia_driver_probe run as Ansible runs it (its main(), arguments on stdin), on a
fixture root: the two reads issue 29 item 6 folded into its one call.

- plan_for: role nvidia_driver's decision comes back with the reading it was made from, and
  it is the decision the filter nvidia_driver_plan makes from the same reading (one rule).
- cuda_toolkits_in: role cuda_toolkit's toolkits, [] when not asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_nvidia_driver import (
    nvidia_driver_plan,
)

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "plugins" / "modules" / "nvidia_driver_probe.py"
# The open driver of the 2x H200 capture (tests/test_nvidia_driver_probe.py).
H200_PROC = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n"
)


def _host(tmp_path: Path) -> Path:
    """A fixture root: one NVIDIA 3D controller on the PCI bus, the open 580 driver loaded."""
    root = tmp_path / "root"
    device = root / "sys/bus/pci/devices/0000:01:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x030200\n")
    (device / "device").write_text("0x2335\n")
    proc = root / "proc/driver/nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(H200_PROC)
    return root


def _run(args: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / ".collections")}
    out = subprocess.run(
        [sys.executable, str(MODULE)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return json.loads(out.stdout)


def test_the_plan_comes_with_the_reading_and_is_the_filters(tmp_path):
    root = _host(tmp_path)
    wanted = {"branch": 580, "packages": ["nvidia-open", "nvidia-persistenced"]}
    got = _run({"root": str(root), "plan_for": wanted})
    assert not got.get("failed"), got
    # An image-installed open 580 driver, no apt package: the role keeps it.
    assert got["plan"]["action"] == "keep"
    assert got["plan"]["loaded"]["version"] == "580.159.04"
    reading = {k: v for k, v in got.items() if k not in ("plan", "invocation", "changed")}
    assert got["plan"] == nvidia_driver_plan(reading, {}, 580, "", wanted["packages"])
    # Another branch wanted: the loaded driver, not apt's, does not satisfy it: stop (foreign).
    other = _run({"root": str(root), "plan_for": {**wanted, "branch": 570}})
    assert other["plan"]["action"] == "foreign"


def test_no_plan_and_no_toolkits_unless_asked(tmp_path):
    got = _run({"root": str(_host(tmp_path))})
    assert "plan" not in got and got["cuda_toolkits"] == []


def test_the_toolkits_under_a_directory(tmp_path):
    local = tmp_path / "usr-local"
    nvcc = local / "cuda-12.8" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    # A stand-in nvcc (a test double): prints what NVIDIA's prints for 12.8.
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    nvcc.chmod(0o755)
    got = _run({"root": str(_host(tmp_path)), "cuda_toolkits_in": str(local)})
    assert got["cuda_toolkits"] == [{"path": str(local / "cuda-12.8"), "version": "12.8"}]
