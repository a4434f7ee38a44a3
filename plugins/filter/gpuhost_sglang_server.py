"""Filters over role sglang_server's decisions.

sums | gpuhost.gpu.config_drift(live_paths, known_good_paths) -> the live config differs from
    the known-good copy (so it has not passed the health gate)
sums | gpuhost.gpu.config_hashes({name: [paths]}) -> a short hash per config, "" when a file
    is missing (role rolling_update names the live, known-good and previous configs so)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_sums as _sums


def config_drift(sums, live_paths, known_good_paths) -> bool:
    """True when a known-good copy exists and the live files are not that copy.

    A run stopped between writing the config and the gated restart leaves such files: the
    templates report no change on the next run, but the config has never passed the gate.
    Without a complete known-good copy (a first deployment) there is nothing to compare: False.
    """
    live, good = list(live_paths or []), list(known_good_paths or [])
    if len(live) != len(good) or not live:
        raise AnsibleFilterError(
            "gpuhost_config_drift: give as many live paths as known-good paths, "
            f"got {live!r} and {good!r}"
        )
    hashes = _sums.parse(sums)
    if not all(path in hashes for path in good):
        return False
    return any(hashes.get(mine) != hashes[kept] for mine, kept in zip(live, good, strict=True))


class FilterModule:
    def filters(self):
        return {
            "config_drift": config_drift,
            "config_hashes": lambda sums, sets: _sums.config_hashes(sums, dict(sets)),
        }
