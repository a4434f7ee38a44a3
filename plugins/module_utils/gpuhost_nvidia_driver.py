"""Pure helpers behind the `nvidia_driver_probe` module (unit-tested in tests/).

Everything here reads files under a root directory and parses tool output; nothing
changes the host and nothing needs the network, so the driver role can run it in check
mode on any host, including one whose package repository is unreachable.
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secure_boot import (
    EFI_DIR,
    read_secure_boot,
)

NVIDIA_PCI_VENDOR = "0x10de"

# Names of the packages that make up an NVIDIA driver install on Debian and Ubuntu
# (NVIDIA's CUDA repo and the distro archives). Together with a version that starts
# with a driver branch ("580.95.05-1"), they identify the packages that must move
# together: holding or upgrading only some of them splits kernel module and library.
_FAMILY_NAME = re.compile(
    r"^(nvidia-|libnvidia-|libcuda1|libcudadebugger|libnvcuvid|libnvoptix|libnvsdm|"
    r"firmware-nvidia-gsp|xserver-xorg-video-nvidia|cuda-drivers)"
)
_FAMILY_VERSION = re.compile(r"^(?:\d+:)?(\d{3})\.\d+(?:\.\d+)?")
# Not part of the set that must match the kernel module: nvidia-driver-pinning-<branch> is the
# pin itself; nvidia-settings, nvidia-xconfig and libxnvctrl0 are X tools that Ubuntu's
# archive ships at its own version (libxnvctrl0 510.47.03-0ubuntu4.24.04.1 sits beside the
# 580.159.04 driver on the H200 host).
_FAMILY_EXCLUDE = re.compile(r"^(nvidia-driver-pinning|nvidia-settings|nvidia-xconfig|libxnvctrl)")

_BRANCH_IN_NAME = re.compile(r"-\d{3}(-|$)")
_PROC_VERSION = re.compile(r"NVRM version:\s*(?P<desc>.*?)\s+(?P<version>\d{3}\.\d+(?:\.\d+)?)\s")


def read_text(path: str) -> str | None:
    """Return a file's text, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def under(root: str, path: str) -> str:
    """`path` (absolute) inside `root`, so tests can point the probe at a fixture tree."""
    return os.path.join(root, path.lstrip("/"))


def parse_proc_version(text: str | None) -> dict:
    """Parse /proc/driver/nvidia/version into {version, flavour}.

    The open module says "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...";
    the proprietary one "NVIDIA UNIX x86_64 Kernel Module  535.104.05 ...".
    """
    if not text:
        return {"version": "", "flavour": "unknown"}
    match = _PROC_VERSION.search(text)
    if not match:
        return {"version": "", "flavour": "unknown"}
    flavour = "open" if "Open Kernel Module" in match.group("desc") else "proprietary"
    return {"version": match.group("version"), "flavour": flavour}


def flavour_from_license(license_text: str | None) -> str:
    """`modinfo -F license nvidia`: "Dual MIT/GPL" is the open module, "NVIDIA" the other."""
    if not license_text:
        return "unknown"
    value = license_text.strip()
    if value == "Dual MIT/GPL":
        return "open"
    if value == "NVIDIA":
        return "proprietary"
    return "unknown"


def upstream_version(package_version: str) -> str:
    """'580.95.05-1' or '1:580.95.05-0ubuntu1' -> '580.95.05' (the driver release)."""
    version = package_version.split(":", 1)[-1]
    return version.split("-", 1)[0]


def branch_of(version: str) -> int | None:
    match = re.match(r"^(?:\d+:)?(\d{3})\.", version or "")
    return int(match.group(1)) if match else None


def version_wanted(version: str, branch: int, exact: str = "") -> bool:
    """Does a driver release (no Debian revision) satisfy the wanted branch/version?"""
    if not version:
        return False
    if exact:
        return upstream_version(version) == exact
    return branch_of(version) == int(branch)


def is_driver_family(name: str, version: str) -> bool:
    if _FAMILY_EXCLUDE.match(name):
        return False
    return bool(_FAMILY_NAME.match(name) and _FAMILY_VERSION.match(version or ""))


def parse_dpkg_query(text: str) -> list[dict]:
    """Lines of `dpkg-query -W -f='${Package}\\t${Version}\\t${Status}\\n'` -> installed packages.

    Status is "<want> <flag> <state>": "hold ok installed" is a held, installed package.
    """
    packages = []
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        name, version, status = parts
        words = status.split()
        if len(words) != 3 or words[2] not in ("installed", "half-configured", "unpacked"):
            continue
        packages.append(
            {"name": name, "version": version, "held": words[0] == "hold", "state": words[2]}
        )
    return packages


def pci_functions(root: str) -> list[dict]:
    """NVIDIA PCI functions from sysfs: bus id, class and device id."""
    found = []
    for device in sorted(glob.glob(under(root, "/sys/bus/pci/devices/*"))):
        vendor = (read_text(os.path.join(device, "vendor")) or "").strip()
        if vendor != NVIDIA_PCI_VENDOR:
            continue
        found.append(
            {
                "bus_id": os.path.basename(device),
                "class": (read_text(os.path.join(device, "class")) or "").strip(),
                "device": (read_text(os.path.join(device, "device")) or "").strip(),
            }
        )
    return found


def is_gpu(function: dict) -> bool:
    # PCI class 0x03xxxx: display controllers (VGA 0x0300, 3D controller 0x0302).
    return function.get("class", "").startswith("0x03")


def is_nvswitch(function: dict) -> bool:
    # NVSwitch ASICs enumerate as NVIDIA "bridge, other" functions (class 0x0680xx).
    return function.get("class", "").startswith("0x0680")


def secure_boot_state(root: str, efivar: str, run_mokutil) -> dict:
    """Secure Boot through the one reader (gpuhost_secure_boot), files read under `root`."""
    return read_secure_boot(
        lambda path: read_bytes(under(root, path)),
        os.path.isdir(under(root, EFI_DIR)),
        run_mokutil,
        efivar,
    )


def loaded_driver(root: str) -> dict:
    """What the running kernel has loaded, read from procfs and sysfs only."""
    proc = read_text(under(root, "/proc/driver/nvidia/version"))
    parsed = parse_proc_version(proc)
    sys_version = (read_text(under(root, "/sys/module/nvidia/version")) or "").strip()
    loaded = proc is not None or bool(sys_version)
    version = sys_version or parsed["version"]
    return {
        "loaded": loaded,
        "version": version,
        "branch": branch_of(version),
        "flavour": parsed["flavour"],
    }


def nvswitch_present(root: str, functions: list[dict]) -> bool:
    if any(is_nvswitch(f) for f in functions):
        return True
    # With the driver loaded, the NVSwitch driver lists its devices here.
    devices = glob.glob(under(root, "/proc/driver/nvidia-nvswitch/devices/*"))
    return bool(devices)


# --- Decisions (used by the role through plugins/filter/gpuhost_nvidia_driver.py) ---------


def loaded_from(probe: dict, gpu_facts: dict | None) -> dict:
    """The loaded driver: preflight's gpuhost_gpu.driver when present, else the probe's."""
    driver = (gpu_facts or {}).get("driver") or {}
    if isinstance(driver.get("loaded"), bool):
        version = driver.get("version")
        version = version if isinstance(version, str) and version != "unknown" else ""
        flavour = driver.get("module")
        if flavour not in ("open", "proprietary"):
            flavour = (probe.get("driver") or {}).get("flavour", "unknown")
        return {
            "loaded": driver["loaded"],
            "version": version,
            "branch": branch_of(version),
            "flavour": flavour,
            "source": "gpuhost_gpu",
        }
    found = dict(probe.get("driver") or {"loaded": False, "version": "", "flavour": "unknown"})
    found.setdefault("branch", branch_of(found.get("version", "")))
    found["source"] = "nvidia_driver_probe"
    return found


def plan(
    probe: dict,
    gpu_facts: dict | None,
    branch: int,
    exact: str,
    packages: list[str],
    force: bool = False,
) -> dict:
    """What the driver role does on this host: skip, keep what is loaded, or install.

    - skip: no NVIDIA GPU on the PCI bus (and not forced): nothing to drive.
    - keep: a suitable open driver is loaded and apt does not manage it through the role's
      packages (an image or runfile install, or another package set of the same release):
      changing nothing is the only safe move.
    - foreign: another driver is loaded that apt does not manage: installing packages over a
      runfile install breaks both, so the role stops and says how to remove it.
    - install: converge the apt packages to the wanted branch/version (idempotent).

    `changes` says whether an install moves anything: a wanted package missing, or one on
    another release. A serving host must be taken out of rotation for that (the new module
    needs a reboot), not for an install that finds everything in place.
    """
    branch = int(branch)
    gpu_facts = gpu_facts or {}
    primary = packages[0]
    loaded = loaded_from(probe, gpu_facts)
    present = bool(probe.get("gpu_present")) or gpu_facts.get("present") is True
    family = list(probe.get("packages") or [])
    primary_pkg = next((p for p in family if p["name"] == primary), None)
    installed = primary_pkg["version"] if primary_pkg else ""
    want = f"{exact}-*" if exact else f"{branch}.*"
    wanted = f"{exact}" if exact else f"branch {branch}"
    loaded_ok = bool(
        loaded.get("loaded")
        and loaded.get("flavour") == "open"
        and version_wanted(loaded.get("version", ""), branch, exact)
    )
    installed_ok = bool(installed) and version_wanted(upstream_version(installed), branch, exact)
    stale = sorted(
        p["name"]
        for p in family
        if not version_wanted(upstream_version(p["version"]), branch, exact)
    )
    # Installed driver packages on another release move with the request, or apt keeps them
    # (held, or a dependency already satisfied) and the driver splits. Branch-named ones
    # (Ubuntu's libnvidia-compute-570) have no release of the new branch: the new packages'
    # Conflicts remove them, and the post-install check catches any that stay.
    movable = [name for name in stale if not _BRANCH_IN_NAME.search(name)]
    requests = [f"{name}={want}" for name in dict.fromkeys([*packages, *movable])]
    described = (
        f"{loaded.get('version') or 'unknown version'} ({loaded.get('flavour', 'unknown')})"
        if loaded.get("loaded")
        else "none"
    )
    if not present and not force:
        action = "skip"
        reason = "no NVIDIA GPU present (no NVIDIA display-class PCI device): nothing to drive"
    elif (
        loaded_ok
        and not primary_pkg
        and all(upstream_version(p["version"]) == loaded.get("version") for p in family)
    ):
        action = "keep"
        reason = (
            f"NVIDIA driver {described} is loaded and satisfies {wanted}; {primary} is not "
            "installed (the driver came with the image, a runfile or other packages of the same "
            "release), so the role leaves it as it is"
        )
    elif loaded.get("loaded") and not loaded_ok and not family:
        action = "foreign"
        reason = (
            f"NVIDIA driver {described} is loaded but was not installed by apt and does not "
            f"satisfy {wanted} with the open kernel modules"
        )
    else:
        action = "install"
        reason = (
            f"converge apt packages to {wanted} (installed {primary}: {installed or 'none'}, "
            f"loaded: {described})"
        )
    missing = sorted(set(packages) - {p["name"] for p in family})
    return {
        "action": action,
        "reason": reason,
        "changes": action == "install" and bool(not installed_ok or stale or missing),
        "missing": missing,
        "gpu_present": present,
        "loaded": loaded,
        "loaded_ok": loaded_ok,
        "installed_version": installed,
        "installed_ok": installed_ok,
        "want_glob": want,
        "wanted": wanted,
        "stale": stale,
        "requests": requests,
        "family": family,
    }


def reboot_needed(probe_after: dict, installed_version: str) -> bool:
    """After an install: is the module the packages ship different from the one running?"""
    driver = probe_after.get("driver") or {}
    if not installed_version:
        return False
    return not (
        driver.get("loaded")
        and driver.get("flavour") == "open"
        and driver.get("version") == upstream_version(installed_version)
    )
