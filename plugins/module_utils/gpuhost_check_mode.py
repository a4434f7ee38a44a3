# Copyright: gpuhost contributors
# Apache-2.0
"""What check mode can and cannot see on a host that was never provisioned (docs/check-mode.md).

A check run creates nothing, so a step that needs something an earlier step only "would"
create cannot run: Ansible cannot become an account that does not exist yet, and the apt
module cannot plan without python3-apt (it installs python3-apt itself only in a real run:
https://docs.ansible.com/ansible/latest/collections/ansible/builtin/apt_module.html).
Such steps are skipped in check mode and named here, in one finding per host.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_finding import (
    finding as make_finding,
)

CHECK = "check_mode.unseen"


def blind_spots(check_mode: bool, apt_importable: bool, users: dict[str, bool]) -> dict:
    """What a check run cannot see: {apt: bool, users_missing: [...], unseen: [...]}.

    apt and users_missing are True/non-empty only in check mode: a real run creates what is
    missing before it is needed, so nothing is skipped there.
    """
    apt_blind = bool(check_mode) and not apt_importable
    missing = sorted(u for u, present in users.items() if not present) if check_mode else []
    unseen = []
    if apt_blind:
        unseen.append("which packages apt would install or upgrade (python3-apt is not installed)")
    for user in missing:
        unseen.append(f"the steps that run as the service account {user!r} (it would be created)")
    return {"apt": apt_blind, "users_missing": missing, "unseen": unseen}


def finding(spots: dict) -> list[dict]:
    """The one finding for a check run that could not see everything; [] when it saw all."""
    if not spots["unseen"]:
        return []
    fixes = []
    if spots["apt"]:
        fixes.append("`apt-get install python3-apt` on the host shows apt's plan in the next check")
    fixes.append("after `gpuhost provision` (which creates them) `gpuhost check` shows every step")
    return [
        make_finding(
            CHECK,
            "warn",
            "check mode on a blank host could not see " + "; ".join(spots["unseen"]),
            _sentence("; ".join(fixes)),
        )
    ]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
