# Copyright: gpuhost contributors
# Apache-2.0
"""Role nccl's one read of the server's Python: is it there, and which NCCL its torch ships.

Pure logic of plugins/modules/nccl_torch.py (issue 29 item 6: one call where a stat and a
command took two). The runner is passed in, so tests give a fake one (a test double).
"""

from __future__ import annotations

import json
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


def parse_ip_json(text: str) -> dict | None:
    """{name: [address, ...]} from `ip -j addr show`; None when the text is not that."""
    try:
        items = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    out = {}
    for item in items:
        if not isinstance(item, dict) or not item.get("ifname"):
            continue
        infos = item.get("addr_info") or []
        out[str(item["ifname"])] = [
            str(a["local"]) for a in infos if isinstance(a, dict) and a.get("local")
        ]
    return out


def _speed(sys_net: str, name: str):
    # /sys/class/net/<if>/speed: Mb/s; -1 or unreadable (down, virtual) means unknown.
    try:
        with open(os.path.join(sys_net, name, "speed")) as handle:
            value = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return value if value > 0 else None


def interfaces(
    ip: str | None,
    run: Callable[[list[str]], tuple[int, str, str]],
    sys_net: str = "/sys/class/net",
) -> dict | None:
    """The host's network interfaces for a serving group's NCCL_SOCKET_IFNAME check:
    {name: {"addresses": [ip, ...] or None (not read), "speed_mbps": int or None}}; the
    names from /sys/class/net, the addresses from `ip -j addr show` (`ip`: its path, None
    when absent). None when /sys/class/net cannot be listed."""
    try:
        names = sorted(os.listdir(sys_net))
    except OSError:
        return None
    addresses = None
    if ip:
        rc, out, _ = run([ip, "-j", "addr", "show"])
        addresses = parse_ip_json(out) if rc == 0 else None
    return {
        name: {
            "addresses": (addresses or {}).get(name, []) if addresses is not None else None,
            "speed_mbps": _speed(sys_net, name),
        }
        for name in names
    }
