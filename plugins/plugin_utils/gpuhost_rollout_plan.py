# Copyright: gpuhost contributors
# Apache-2.0
"""The batches of a rolling update or rollback (playbooks/update.yml, rollback.yml) where a
serving group is one unit (issue 30; docs/fleet.md "Serving groups").

Ansible takes a play's hosts in order and cuts them into batches by `serial`; it cannot move a
host. So the play's own order must already keep each group's hosts together, and every host of
a group must be in the play: a group is one server, started and gated as one. `serial_sizes`
checks both and turns the units (gpuhost_serving_group.batches) into the list of batch sizes
Ansible's `serial` accepts. Pure; the filter gpuhost.gpu.rollout_serial calls it.
"""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_serving_group import (
    batches,
    of_host,
)


class PlanError(ValueError):
    """A play's hosts that cannot be rolled group by group: the message names the group, its
    hosts and the fix."""


def _groups(hosts: list[str], hostvars) -> dict[str, dict]:
    """{group name: its of_host answer} for the groups of the play's hosts."""
    found: dict[str, dict] = {}
    for host in hosts:
        group = of_host(host, hostvars)
        if group and group["name"] not in found:
            found[group["name"]] = group
    return found


def serial_sizes(hosts, hostvars, serial) -> list[int]:
    """Ansible's `serial` as a list of batch sizes for the play's `hosts` (in play order):
    each batch holds whole units (a serving group, or a host on its own), `serial` of them
    (a count or "N%" of the units). PlanError when a group is not wholly in the play or its
    hosts are not next to each other."""
    hosts = [str(h) for h in hosts]
    groups = _groups(hosts, hostvars)
    for name, group in groups.items():
        left_out = [m for m in group["members"] if m not in hosts]
        if left_out:
            taken = [m for m in group["members"] if m in hosts]
            raise PlanError(
                f"serving group {name}: this run takes {', '.join(taken)} but not "
                f"{', '.join(left_out)}; a group is one server, updated and rolled back with "
                f"all its hosts at once. Fix: limit the run to all of them "
                f"(--limit {','.join(group['members'])}) or to none"
            )
    group_of = {h: g["name"] for g in groups.values() for h in g["members"]}
    for name, group in groups.items():
        places = [hosts.index(m) for m in group["members"]]
        between = [h for h in hosts[min(places) : max(places) + 1] if group_of.get(h) != name]
        if between:
            raise PlanError(
                f"serving group {name}: its hosts {', '.join(group['members'])} are not next "
                f"to each other in the play's order ({', '.join(between)} between them), so a "
                f"batch would split the group. Fix: list the hosts of group {name} next to "
                "each other in the inventory"
            )
    return batches(hosts, group_of, serial)[1]
