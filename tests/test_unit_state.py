"""module_utils/gpuhost_unit_state.py: the units' state path_stats reads in one `systemctl show`
(issue 29 item 6). The output below is systemctl's for two units, one of them unknown."""

from __future__ import annotations

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_unit_state as us

SHOW = """LoadState=loaded
ActiveState=active
SubState=running
UnitFileState=enabled

LoadState=not-found
ActiveState=inactive
SubState=dead
UnitFileState=
"""


def test_one_block_per_unit_in_the_order_asked():
    states = us.parse_show(SHOW, ["sglang-server.service", "gone.service"])
    assert states["sglang-server.service"] == {
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "running",
        "UnitFileState": "enabled",
    }
    assert states["gone.service"]["LoadState"] == "not-found"
    assert states["gone.service"]["UnitFileState"] == ""


def test_output_that_does_not_fit_the_units_is_refused():
    with pytest.raises(us.UnitStateError, match="1 block"):
        us.parse_show(SHOW.split("\n\n")[0], ["a.service", "b.service"])


def test_argv_names_each_unit_after_the_options():
    argv = us.show_argv("/bin/systemctl", ["a.service", "b-firewall.service"])
    assert argv[:2] == ["/bin/systemctl", "show"]
    assert argv[-3:] == ["--", "a.service", "b-firewall.service"]
    assert argv[2] == "--property=LoadState,ActiveState,SubState,UnitFileState"


@pytest.mark.parametrize("unit", ["--all", "a service", "a", "*.service", ""])
def test_what_is_not_a_unit_name_is_refused(unit):
    with pytest.raises(us.UnitStateError, match="not a unit name"):
        us.show_argv("/bin/systemctl", [unit])
