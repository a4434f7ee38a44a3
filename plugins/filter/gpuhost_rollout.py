"""The batches of the rolling plays (playbooks/update.yml, rollback.yml), serving groups whole.

ansible_play_hosts_all | gpuhost.gpu.rollout_serial(hostvars, rolling_update_serial | default(1))
    -> [batch size, ...] for the play's `serial`: each batch holds `serial` units (a serving
    group or a host on its own), a group's hosts always in one batch. A group only partly in
    the run (--limit) or whose hosts are not next to each other in the inventory is an error
    naming the group, its hosts and the fix (plugins/plugin_utils/gpuhost_rollout_plan.py).
ansible_play_hosts_all | gpuhost.gpu.rollout_plan(hostvars, serial)
    -> {"batches": [[host, ...], ...], "error": ""}: the same decision as data, for the first
    play's check that refuses such a run before any change, with the message as its fail_msg.

Ansible templates a play's `serial` before the play's tasks, with `hostvars` only once an
earlier play of the run has run (ansible-core creates HostVars on its first play): a play
whose serial uses rollout_serial is never a playbook's first, and passes
`hostvars | default(none)`. Without hostvars the filter answers only where nothing runs
(--syntax-check, --list-hosts/-tasks/-tags: ansible-lint's syntax check is one), else it is an
error: a split group is never guessed.
"""

from __future__ import annotations

from ansible import context
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_rollout_plan import (
    serial_sizes,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_serving_group import SerialError


def _sizes(hosts, hostvars, serial) -> list[int]:
    try:
        return serial_sizes(hosts, hostvars, serial)
    except SerialError:
        raise ValueError(
            f"rolling_update_serial: got {serial!r}; allowed: a count of units (a serving group "
            "or a host on its own) >= 1, or a percentage 1%..100% of them"
        ) from None


# ansible-playbook's options under which no play runs (the serial then batches nothing).
_LISTING = ("syntax", "listhosts", "listtasks", "listtags")


def rollout_serial(hosts, hostvars, serial=1) -> list[int]:
    if hostvars is None:
        if any(context.CLIARGS.get(option) for option in _LISTING):
            return [1]
        raise AnsibleFilterError(
            "gpuhost_rollout_serial: hostvars is not defined yet where this play's serial is "
            "templated; allowed: a play after another one of the same run (Ansible creates "
            "hostvars on a run's first play), as in playbooks/update.yml"
        )
    try:
        return _sizes(list(hosts or []), hostvars, serial)
    except ValueError as err:  # GroupError, PlanError, a bad serial
        raise AnsibleFilterError(str(err)) from None


def rollout_plan(hosts, hostvars, serial=1) -> dict:
    hosts = [str(h) for h in hosts or []]
    try:
        sizes = _sizes(hosts, hostvars, serial)
    except ValueError as err:
        return {"batches": [], "error": str(err)}
    batches, start = [], 0
    for size in sizes:
        batches.append(hosts[start : start + size])
        start += size
    return {"batches": batches, "error": ""}


class FilterModule:
    def filters(self):
        return {"rollout_serial": rollout_serial, "rollout_plan": rollout_plan}
