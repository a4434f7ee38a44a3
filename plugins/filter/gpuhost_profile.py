"""Filters over the serving-profile helpers (plugins/module_utils/gpuhost_profile.py).

value | gpuhost_env_value      -> the value as a systemd EnvironmentFile line reads it back
argv | gpuhost_exec_start      -> an ExecStart= command line for the argument list
"""

from __future__ import annotations

import importlib.util
import os

_PATH = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "module_utils", "gpuhost_profile.py"
)
_SPEC = importlib.util.spec_from_file_location("gpuhost_profile_filters", _PATH)
_logic = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_logic)


class FilterModule:
    def filters(self):
        return {
            "gpuhost_env_value": _logic.env_value,
            "gpuhost_exec_start": lambda argv: _logic.exec_start([str(a) for a in argv]),
        }
