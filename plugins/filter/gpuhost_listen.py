# Copyright: gpuhost contributors
# Apache-2.0
"""The listen rules (plugins/module_utils/gpuhost_listen.py) for the roles' Jinja."""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_listen as _listen


def gpuhost_is_loopback(host):
    """sglang_server_host | gpuhost.gpu.is_loopback: only this machine reaches it."""
    return _listen.is_loopback(host)


def gpuhost_api_key_valid(key):
    """sglang_server_api_key | gpuhost.gpu.api_key_valid: maskable (never printed)."""
    return _listen.api_key_valid(key)


class FilterModule:
    def filters(self):
        return {"is_loopback": gpuhost_is_loopback, "api_key_valid": gpuhost_api_key_valid}
