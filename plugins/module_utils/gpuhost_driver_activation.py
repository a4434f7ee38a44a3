# Copyright: gpuhost contributors
# Apache-2.0
"""How a newly installed NVIDIA driver gets loaded: modprobe, a reboot, or neither (and why).

Two halves, both unit-tested (tests/test_driver_activation.py):
- gpu_holders() reads sysfs (under a root, so tests use fixture trees): what holds the GPUs
  now - nouveau bound or loaded, an nvidia module of another release loaded and in use.
- decide() is the pure decision role nvidia_driver acts on.

Imported by module gpuhost.gpu.nvidia_driver_probe (as collection code)
and by the role's filter plugin.
"""

from __future__ import annotations

import glob
import os

POLICIES = ("never", "if_needed", "always")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def gpu_holders(root: str, gpu_bus_ids: list[str]) -> dict:
    """What the running kernel has bound to the GPUs and loaded (sysfs only, read-only)."""
    bound = {}
    for bus_id in gpu_bus_ids:
        link = _under(root, f"/sys/bus/pci/devices/{bus_id}/driver")
        bound[bus_id] = os.path.basename(os.readlink(link)) if os.path.islink(link) else ""
    nvidia = _under(root, "/sys/module/nvidia")
    refcnt = _read(os.path.join(nvidia, "refcnt"))
    users = sorted(os.path.basename(p) for p in glob.glob(os.path.join(nvidia, "holders", "*")))
    return {
        "bound": bound,
        "nouveau_loaded": os.path.isdir(_under(root, "/sys/module/nouveau")),
        "nvidia_loaded": os.path.isdir(nvidia),
        "nvidia_version": _read(os.path.join(nvidia, "version")) or "",
        "nvidia_refcnt": int(refcnt) if refcnt and refcnt.isdigit() else None,
        "nvidia_users": users,
    }


def holding(holders: dict) -> list[str]:
    """Why a plain modprobe cannot load the new module; [] when nothing holds the GPUs."""
    reasons = []
    for bus_id, driver in sorted((holders.get("bound") or {}).items()):
        if driver and driver not in ("nvidia", "vfio-pci"):
            reasons.append(f"GPU {bus_id} is bound to {driver}")
    if holders.get("nouveau_loaded"):
        reasons.append("the nouveau module is loaded")
    if holders.get("nvidia_loaded"):
        version = holders.get("nvidia_version") or "of another release"
        users = holders.get("nvidia_users") or []
        use = f", used by {', '.join(users)}" if users else ""
        reasons.append(f"an nvidia module {version} is loaded{use}")
    return reasons


def decide(
    *,
    needed: bool,
    policy: str,
    serving: list[str],
    container: bool,
    local: bool,
    holders: dict,
    module_available: bool = True,
    load_failed: str = "",
) -> dict:
    """The activation of a driver the packages installed but the kernel does not run.

    action: none (nothing to do) | load (modprobe: nothing holds the GPUs) | reboot |
    skip (a reboot is needed and not done: `reason` says why). `would_reboot` is True
    whenever the driver stays unloaded, so the run record and the summary can say so.

    - A container's kernel is the host's: neither load nor reboot.
    - Nothing holds the GPUs and the module is built for the running kernel: load it, no
      reboot, whatever the policy (loading disturbs nothing).
    - Otherwise a reboot: never under `never`; never on a local connection (it would reboot
      the control node); never while a server unit is active unless the policy is `always`
      (a serving host is rebooted only with consent, or drained by the rolling path).
    """
    if policy not in POLICIES:
        raise ValueError(f"nvidia_driver_reboot: got {policy!r}; allowed: {', '.join(POLICIES)}")
    if not needed:
        return {
            "action": "none",
            "reason": "the installed driver is the one loaded",
            "would_reboot": False,
        }
    if container:
        return {
            "action": "skip",
            "would_reboot": True,
            "reason": "this is a container: its kernel is the host's (no load, no reboot)",
        }
    held = holding(holders)
    if not module_available:
        held.append("no nvidia module is built for the running kernel")
    if load_failed:
        held.append(f"modprobe nvidia failed: {load_failed}")
    if not held:
        return {
            "action": "load",
            "would_reboot": False,
            "reason": "nothing holds the GPUs (no nouveau, no nvidia module loaded): "
            "modprobe loads the new module without a reboot",
        }
    why = "; ".join(held)
    if policy == "never":
        return {
            "action": "skip",
            "would_reboot": True,
            "reason": f"nvidia_driver_reboot=never ({why})",
        }
    if local:
        return {
            "action": "skip",
            "would_reboot": True,
            "reason": f"the connection is local: a reboot would restart the control node ({why})",
        }
    if serving and policy != "always":
        return {
            "action": "skip",
            "would_reboot": True,
            "reason": f"the host is serving ({', '.join(serving)} active): rebooting it needs "
            f"nvidia_driver_reboot=always or the rolling path ({why})",
        }
    return {"action": "reboot", "would_reboot": False, "reason": f"a reboot loads it: {why}"}
