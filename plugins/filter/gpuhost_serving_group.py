"""The serving group of a host (several hosts that are one SGLang server; docs/multi-node.md).

inventory_hostname | gpuhost.gpu.serving_group(hostvars) -> {} or the group as
plugins/plugin_utils/gpuhost_serving_group.py `of_host` returns it (rank, members, the
--dist-init-addr value, the SGLang flags of this host). group_vars/all/sglang_server.yml
defines `sglang_server_serving_group` with it, once for every role.
group | gpuhost.gpu.group_findings(hostvars, ansible_play_hosts_all) -> preflight's findings.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_serving_group as serving


def serving_group(host, hostvars) -> dict:
    try:
        return serving.of_host(str(host), hostvars)
    except serving.GroupError as err:
        raise AnsibleFilterError(str(err)) from None


def group_findings(group, hostvars, run_hosts) -> list:
    """Preflight's findings for this host's serving group ([] for a host alone)."""
    if not group:
        return []
    return serving.preflight(group, hostvars, list(run_hosts or []))


def group_reach_targets(group, host, hostvars) -> list:
    """What module group_reach connects to from this node ([] for a host alone)."""
    return serving.reach_targets(group, str(host), hostvars) if group else []


def group_reach_findings(results, group, host) -> list:
    """The finding of this node's group_reach results ([] for a host alone)."""
    return serving.reach_findings(group, str(host), list(results or [])) if group else []


def group_gate_message(failed, group, hostvars) -> str:
    """Why a serving group failed its gate: each failed node, its rank and its gate's cause
    (its registered _sglang_server_gate, read through hostvars)."""
    parts = []
    for node in list(failed or []):
        gate = hostvars[node].get("_sglang_server_gate") or {}
        cause = gate.get("cause") or gate.get("msg") or "no result"
        rank = list(group["members"]).index(node)
        parts.append(
            f"{node} (rank {rank} of serving group {group['name']}) failed its gate: {cause}"
        )
    return "; ".join(parts)


class FilterModule:
    def filters(self):
        return {
            "serving_group": serving_group,
            "group_findings": group_findings,
            "group_reach_targets": group_reach_targets,
            "group_reach_findings": group_reach_findings,
            "group_gate_message": group_gate_message,
        }
