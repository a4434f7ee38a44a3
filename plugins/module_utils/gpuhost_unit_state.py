"""The state of several systemd units from one `systemctl show` (module path_stats, `units`).

What ansible.builtin.systemd_service's `status` held for one unit, for several units in one
round trip: LoadState, ActiveState, SubState and UnitFileState, the keys the roles read.
"""

from __future__ import annotations

import re

PROPERTIES = ("LoadState", "ActiveState", "SubState", "UnitFileState")
# A unit name systemctl takes as one argument: no option, no space, no glob.
_UNIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:_.@\\-]*\.(service|socket|timer|target|mount|path)$")


class UnitStateError(ValueError):
    """A unit name that is not one, or systemctl output that does not fit the units asked."""


def show_argv(systemctl: str, units: list[str]) -> list[str]:
    """argv of the one `systemctl show` for units (each checked to be a unit name)."""
    for unit in units:
        if not _UNIT.match(unit or ""):
            raise UnitStateError(
                f"units: {unit!r} is not a unit name (letters, digits, :_.@\\-, then a type "
                "such as .service)"
            )
    return [systemctl, "show", "--property=" + ",".join(PROPERTIES), "--", *units]


def parse_show(text: str, units: list[str]) -> dict[str, dict[str, str]]:
    """unit -> {property: value} from `systemctl show` of units: one block per unit, in the
    order asked, blocks separated by an empty line. A property systemd leaves out is ""."""
    blocks: list[dict[str, str]] = [{}]
    for line in str(text or "").splitlines():
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, sep, value = line.partition("=")
        if sep:
            blocks[-1][key] = value
    blocks = [block for block in blocks if block]
    if len(blocks) != len(units):
        raise UnitStateError(
            f"systemctl show gave {len(blocks)} block(s) for {len(units)} unit(s) {units}"
        )
    return {
        unit: {key: block.get(key, "") for key in PROPERTIES}
        for unit, block in zip(units, blocks, strict=True)
    }
