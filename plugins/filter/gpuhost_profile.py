"""Filters over the serving-profile helpers (plugins/plugin_utils/gpuhost_profile_render.py).

value | gpuhost.gpu.env_value      -> the value as a systemd EnvironmentFile line reads it back
argv | gpuhost.gpu.exec_start      -> an ExecStart= command line for the argument list
text | gpuhost.gpu.unit_text       -> free text for Description= (no control characters, % escaped)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile_render as _logic


def _unit_text(value):
    try:
        return _logic.unit_text(value)
    except ValueError as exc:
        raise AnsibleFilterError(f"unit_text: {exc}") from exc


class FilterModule:
    def filters(self):
        return {
            "env_value": _logic.env_value,
            "unit_text": _unit_text,
            "exec_start": lambda argv: _logic.exec_start([str(a) for a in argv]),
        }
