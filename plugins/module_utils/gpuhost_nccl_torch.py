# Copyright: gpuhost contributors
# Apache-2.0
"""Role nccl's one read of the server's Python: is it there, and which NCCL its torch ships.

Pure logic of plugins/modules/nccl_torch.py (issue 29 item 6: one call where a stat and a
command took two). The runner is passed in, so tests give a fake one (a test double).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

# torch.cuda.nccl.version() is a tuple of ints (2, 21, 5); printed joined by dots.
NCCL_VERSION_SCRIPT = "import torch; print('.'.join(map(str, torch.cuda.nccl.version())))"
_VERSION = re.compile(r"[0-9]+(\.[0-9]+)*")


def look(python: str, read_version: bool, run: Callable[[list[str]], tuple[int, str, str]]) -> dict:
    """What role nccl needs of python: `exists` as an lstat sees it (a link counts, as
    ansible.builtin.stat with follow=false said), and, when asked and it exists, the NCCL
    version its torch reports ("" when torch cannot say: not installed, no CUDA build)."""
    exists = os.path.lexists(python)
    result = {"exists": exists, "version": "", "exit_status": None, "stderr": ""}
    if not (exists and read_version):
        return result
    rc, out, err = run([python, "-c", NCCL_VERSION_SCRIPT])
    lines = out.strip().splitlines()
    last = lines[-1].strip() if lines else ""
    result.update(
        exit_status=rc,
        version=last if rc == 0 and _VERSION.fullmatch(last) else "",
        stderr=err[-2000:],
    )
    return result
