"""Filters over the serving-profile helpers (plugins/module_utils/gpuhost_profile_render.py).

value | gpuhost_env_value      -> the value as a systemd EnvironmentFile line reads it back
argv | gpuhost_exec_start      -> an ExecStart= command line for the argument list
"""

from __future__ import annotations

import os
import sys

# Custom module_utils are not importable from controller plugins outside a collection: put
# plugins/module_utils on sys.path (the gpuhost_ prefix keeps its module names unique).
_UTILS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "module_utils"))
if _UTILS not in sys.path:
    sys.path.append(_UTILS)

import gpuhost_profile_render as _logic  # noqa: E402


class FilterModule:
    def filters(self):
        return {
            "gpuhost_env_value": _logic.env_value,
            "gpuhost_exec_start": lambda argv: _logic.exec_start([str(a) for a in argv]),
        }
