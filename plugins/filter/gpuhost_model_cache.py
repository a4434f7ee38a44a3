# Copyright: gpuhost contributors
# Apache-2.0
"""Filters exposing role model_cache's decisions (plugins/plugin_utils/gpuhost_model_cache.py).

space | gpuhost.gpu.model_cache_disk_finding(hf_home, model, size_gib, profile_gib, margin)
    -> a finding (check model_cache.disk)
show_text | gpuhost.gpu.model_cache_unit_state             -> absent|running|succeeded|failed
state | gpuhost.gpu.model_cache_start_action(marker_exists) -> start|restart|wait|finish|done
{...} | gpuhost.gpu.model_cache_systemd_run                 -> the systemd-run argv
{...} | gpuhost.gpu.model_cache_download_errors             -> [errors naming the variables]
first_line | gpuhost.gpu.model_cache_cli_python(cli)        -> the CLI's interpreter argv
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_model_cache as _mc
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_plain import plain


def model_cache_disk_finding(space, hf_home, model, size_gib, profile_gib, margin_gib, adopt=None):
    space = plain(space)
    # What adopting a user's cache (hf_cache_adopt in check mode) would link or find there.
    adopt = plain(adopt) or {}
    linked = int(adopt.get("bytes_linked") or 0) + int(adopt.get("bytes_reused") or 0)
    total = int(space.get("bytes") or 0)
    # Measured per revision (path_size's revision option): the files of other revisions stay
    # beside the new one and are not part of its download.
    mine = int(space.get("revision_bytes", total) or 0)
    try:
        size, source = _mc.expected_size(float(size_gib or 0), float(profile_gib or 0))
        return _mc.disk_finding(
            free_bytes=int(space.get("free_bytes") or 0),
            probe_path=str(space.get("probe_path") or ""),
            hf_home=str(hf_home),
            model=str(model),
            size_gib=size,
            size_source=source,
            margin_gib=float(margin_gib),
            partial_bytes=mine,
            kept_bytes=int(space.get("other_revision_bytes", max(0, total - mine)) or 0),
            linked_bytes=linked,
        )
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from None


def model_cache_unit_state(show_text):
    return _mc.unit_state(_mc.parse_show(str(show_text or "")))


def model_cache_start_action(state, marker_exists):
    return _mc.start_action(str(state), bool(marker_exists))


def model_cache_download_errors(spec):
    spec = plain(spec)
    return _mc.validate_download(
        model=spec["model"],
        revision=spec["revision"],
        include=spec.get("include") or [],
        env=spec.get("env") or {},
        cli=spec["cli"],
        hf_home=spec["hf_home"],
    )


def model_cache_cli_python(shebang, cli):
    try:
        return _mc.python_of(str(shebang or ""), str(cli))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def model_cache_systemd_run(spec):
    spec = plain(spec)
    try:
        return _mc.systemd_run_argv(**spec)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {
            "model_cache_disk_finding": model_cache_disk_finding,
            "model_cache_unit_state": model_cache_unit_state,
            "model_cache_start_action": model_cache_start_action,
            "model_cache_download_errors": model_cache_download_errors,
            "model_cache_systemd_run": model_cache_systemd_run,
            "model_cache_cli_python": model_cache_cli_python,
        }
