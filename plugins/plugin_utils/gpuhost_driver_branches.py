"""NVIDIA driver branches: which ones exist, how long each is supported, and which GPUs and CUDA
lanes each can run. One table, read by role nvidia_driver's entry point `branch` (through the
filter driver_branch_finding) before any change; docs/driver-branches.md says the same in words.

Sources (docs/driver-branches.md links them):
- NVIDIA Data Center Drivers, "Supported Drivers and CUDA Toolkit Versions" (the R620 edition):
  R580 long-term support branch, end of life June 2028; R595 production branch, March 2027;
  R620 long-term support branch, September 2029; each runs CUDA 13 and older without the forward
  compatibility package. New feature branches (590, 610, ...) are short-lived and not listed.
- NVIDIA's Unix driver deprecation schedule: the 580 series is the last for Maxwell, Pascal and
  Volta GPUs.
- NVIDIA, "NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules": the open modules
  (the only flavour gpuhost installs, the only one Blackwell runs) are not compatible with
  Maxwell, Pascal or Volta; Turing and later run them.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import finding

# branch -> NVIDIA's designation, last month of support (YYYY-MM), newest CUDA major it runs.
BRANCHES = {
    580: {"designation": "long-term support", "end_of_life": "2028-06", "cuda_major": 13},
    595: {"designation": "production", "end_of_life": "2027-03", "cuda_major": 13},
    620: {"designation": "long-term support", "end_of_life": "2029-09", "cuda_major": 13},
}

# GPU architectures (nvidia-smi's product_architecture) the open kernel modules support.
OPEN_MODULE_ARCHITECTURES = ("Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell")
# Architectures whose last driver branch is 580 (with the proprietary module only).
LAST_BRANCH_580 = ("Maxwell", "Pascal", "Volta")

# The CUDA major version each python_env lane's wheels run on.
LANE_CUDA_MAJOR = {"cu128": 12, "cu13": 13}

CHECK = "nvidia_driver.branch"


def _finding(status, message, fix=""):
    return finding(CHECK, status, message, fix)


def _known():
    return ", ".join(
        f"{b} ({v['designation']}, until {v['end_of_life']})" for b, v in sorted(BRANCHES.items())
    )


def _long_term():
    return " or ".join(
        str(b) for b, v in sorted(BRANCHES.items()) if v["designation"] == "long-term support"
    )


def driver_branch_finding(branch, today, architectures=(), lane=""):
    """One finding on nvidia_driver_branch: `today` is 'YYYY-MM[-DD]' (the controller's UTC
    date), `architectures` the GPUs' architectures where the driver reports them (a driverless
    host has none yet), `lane` python_env's CUDA lane."""
    try:
        branch = int(branch)
    except (TypeError, ValueError):
        return _finding(
            "fail",
            f"nvidia_driver_branch: {branch!r} is not a driver branch number",
            f"Set nvidia_driver_branch to one of: {_known()}.",
        )
    archs = sorted({a for a in architectures or () if a and a != "unknown"})
    old = [a for a in archs if a not in OPEN_MODULE_ARCHITECTURES]
    if old:
        last = (
            " (R580 is their last branch, proprietary module only)"
            if any(a in LAST_BRANCH_580 for a in old)
            else ""
        )
        return _finding(
            "fail",
            f"nvidia_driver_branch: {branch}: the host's {', '.join(old)} GPUs cannot run the open "
            f"kernel modules gpuhost installs (Turing and later){last}",
            "Serve from Turing or newer GPUs, or manage the driver yourself "
            "(nvidia_driver_enabled: false).",
        )
    info = BRANCHES.get(branch)
    if info is None:
        return _finding(
            "warn",
            f"nvidia_driver_branch: {branch} is not one of NVIDIA's supported production or "
            f"long-term branches ({_known()}); a new feature branch is short-lived and an old "
            "branch gets no fixes",
            f"Set nvidia_driver_branch to {_long_term()} (long-term support) for a fleet.",
        )
    need = LANE_CUDA_MAJOR.get(lane)
    if need is not None and need > info["cuda_major"]:
        return _finding(
            "fail",
            f"nvidia_driver_branch: {branch} runs CUDA {info['cuda_major']} at most; "
            f"python_env_lane {lane} needs CUDA {need}",
            "Pick a newer branch or the cu128 lane.",
        )
    what = f"R{branch}: {info['designation']} branch, supported until {info['end_of_life']}"
    if str(today)[:7] > info["end_of_life"]:
        return _finding(
            "warn",
            f"{what}: past its end of life ({str(today)[:10]}), no more security fixes",
            f"Move to a supported branch: {_long_term()} (long-term support), with "
            "`gpuhost update` (one worker at a time).",
        )
    on = f" on {', '.join(archs)}" if archs else ""
    lane_text = f", CUDA {need} lane {lane}" if need is not None else ""
    return _finding("pass", f"{what}{on}{lane_text}")
