"""Check mode: a branch change is shown, nothing moves. Stand-in packages (a test double of
NVIDIA's repository, ../README.md)."""

import pytest
from conftest import inventory_hosts, run_playbook, snapshot


@pytest.fixture(scope="module")
def checked():
    names = inventory_hosts()
    before = snapshot(names)
    # Ask for the other branch than the one installed, so there is a change to show.
    current = before[names[0]]["versions"]["nvidia-open"]
    target = 570 if current.startswith("580.") else 580
    out = run_playbook({"nvidia_driver_branch": target, "nvidia_driver_version": ""}, check=True)
    return out, before, snapshot(names)


def test_check_mode_shows_the_change_and_changes_nothing(host, checked):
    out, before, after = checked
    name = host.backend.get_hostname()
    assert out["rc"] == 0, out["stats"]
    assert out["stats"][name]["changed"] > 0  # the branch change it would make
    assert after[name] == before[name]
