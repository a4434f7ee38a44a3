# Copyright: gpuhost contributors
# Apache-2.0
"""The CUDA toolkits installed under a directory and the release each compiler reports.

Run by plugins/modules/nvidia_driver_probe.py (option cuda_toolkits_in) for role
cuda_toolkit: one call for what an ansible.builtin.find, a looped stat and a looped command
took (issue 29 item 6). The runner is passed in, so tests give a fake one (a test double).
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Callable

_RELEASE = re.compile(r"release ([0-9]+[.][0-9]+)")


class ToolkitError(Exception):
    """A compiler that is there but cannot say its release (the role stops on it)."""


def release_of(nvcc_output: str) -> str:
    """'12.8' from nvcc --version's 'Cuda compilation tools, release 12.8, V12.8.93'."""
    found = _RELEASE.search(nvcc_output)
    return found.group(1) if found else "unknown"


def toolkits(parent: str, run: Callable[[list[str]], tuple[int, str, str]]) -> list[dict]:
    """Each directory parent/cuda-* (a link there is not one, as find with file_type
    directory saw it) that has bin/nvcc (lstat: a link counts), with its release; sorted by
    path. A compiler that fails raises ToolkitError naming it and its error."""
    try:
        names = sorted(n for n in os.listdir(parent) if fnmatch.fnmatchcase(n, "cuda-*"))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        home = os.path.join(parent, name)
        if not stat.S_ISDIR(os.lstat(home).st_mode):
            continue
        nvcc = os.path.join(home, "bin", "nvcc")
        if not os.path.lexists(nvcc):
            continue
        rc, out, err = run([nvcc, "--version"])
        if rc != 0:
            raise ToolkitError(f"{nvcc} --version failed (rc {rc}): {err.strip()[-500:]}")
        found.append({"path": home, "version": release_of(out)})
    return found
