# Copyright: gpuhost contributors
# Apache-2.0
"""The decisions of `gpuhost adopt --apply` (plugins/plugin_utils/gpuhost_adopt_apply.py and
gpuhost_adopt_clients.py) for playbooks/adopt_apply.yml."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_adopt_apply as _apply
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_adopt_clients as _clients


def gpuhost_adopt_server(servers, pid):
    """_found.servers | gpuhost.gpu.adopt_server(pid): the server the proposal was made of."""
    try:
        return _apply.server(servers, pid)
    except _apply.ApplyError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def gpuhost_adopt_listen(server):
    """server | gpuhost.gpu.adopt_listen: {host, port, api_key_set} of the old listener."""
    return _clients.old_listen(server)


def gpuhost_adopt_clients(old, new):
    """old | gpuhost.gpu.adopt_clients(new): what the old server's clients must change."""
    return _clients.clients(old, new)


class FilterModule:
    def filters(self):
        return {
            "adopt_server": gpuhost_adopt_server,
            "adopt_listen": gpuhost_adopt_listen,
            "adopt_clients": gpuhost_adopt_clients,
        }
