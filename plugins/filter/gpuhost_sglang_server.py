"""Filters over role sglang_server's decisions.

files | gpuhost.gpu.kept_drift(names) -> the live config differs from the known-good copy (so
    it has not passed the health gate), from gpuhost.gpu.file_set's check_only entries that
    compare the known-good copy with the live files (configure.yml)
sums | gpuhost.gpu.config_hashes({name: [paths]}) -> a short hash per config, "" when a file
    is missing (role rolling_update names the live, known-good and previous configs so)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_sums as _sums


def kept_drift(files, names) -> bool:
    """A run stopped between writing the config and the gated restart leaves live files that
    are not the known-good copy: the templates report no change on the next run, but the
    config has never passed the gate. From file_set's results: `files[name]` of check_only
    entries whose src is a live file and whose path is its known-good copy. True when every
    named copy was found (nothing to create, not refused) and one of them holds other content
    than its live file;
    a copy whose owner or mode alone differ is the same config. A missing copy (a first
    deployment): False."""
    names = list(names or [])
    if not names or not isinstance(files, dict) or any(n not in files for n in names):
        raise AnsibleFilterError(
            "gpuhost_kept_drift: give file_set's files and the names of its known-good "
            f"entries, got names {names!r} and files {_keys(files)!r}"
        )
    kept = [files[name] for name in names]
    if any(entry.get("created") or entry.get("refused") for entry in kept):
        return False
    return any("content" in (entry.get("fixed") or []) for entry in kept)


def _keys(files):
    return sorted(files) if isinstance(files, dict) else files


class FilterModule:
    def filters(self):
        return {
            "kept_drift": kept_drift,
            "config_hashes": lambda sums, sets: _sums.config_hashes(sums, dict(sets)),
        }
