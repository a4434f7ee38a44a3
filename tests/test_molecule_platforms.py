"""Molecule platforms are defined once (issue 16, item 9).

The systemd container shape (command, SYS_ADMIN, the host's cgroup tree, the tmpfs mounts)
lives only in molecule/common/create.yml, which the base config names as every scenario's
create playbook; the standard Debian 12 + 13 pair lives only in the base config. A scenario
lists platforms only when its hosts differ, and then says name, image, groups and what it
needs beyond the shape. These tests read the real files and fail when a scenario repeats the
shape or stops using the shared create step.
"""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / ".config" / "molecule" / "config.yml"
CREATE = ROOT / "molecule" / "common" / "create.yml"
SCENARIOS = sorted(p.parent.name for p in ROOT.glob("molecule/*/molecule.yml"))
# Keys that only the shared create playbook sets.
SHAPE_KEYS = {"pre_build_image", "command", "cgroupns_mode", "tmpfs", "privileged"}
SHAPE_VOLUME = "/sys/fs/cgroup"
SHAPE_CAPABILITY = "SYS_ADMIN"
# What a scenario's platform entry may say.
ALLOWED_KEYS = {
    "name",
    "image",
    "groups",
    "volumes",
    "capabilities",
    "network_mode",
    "published_ports",
    "networks",
    "docker_networks",
}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _shape() -> dict:
    (play,) = _load_list(CREATE)
    return play["vars"]["_scenario_systemd_shape"]


def _load_list(path: Path) -> list:
    return yaml.safe_load(path.read_text()) or []


def _repeats(platform: dict) -> list[str]:
    found = sorted(SHAPE_KEYS & set(platform))
    found += [f"volume {v}" for v in platform.get("volumes", []) if SHAPE_VOLUME in str(v)]
    if SHAPE_CAPABILITY in platform.get("capabilities", []):
        found.append(f"capability {SHAPE_CAPABILITY}")
    found += [f"key {k}" for k in sorted(set(platform) - ALLOWED_KEYS - SHAPE_KEYS)]
    return found


def test_there_are_scenarios():
    assert {"default", "verify", "rolling_update"} <= set(SCENARIOS)


def test_base_config_names_the_shared_create_playbook_and_the_standard_pair():
    base = _load(BASE)
    assert base["provisioner"]["playbooks"]["create"] == "../common/create.yml"
    assert CREATE.is_file()
    names = [p["name"] for p in base["platforms"]]
    # Interpolated per scenario, so two scenarios never share a container name.
    assert all("${MOLECULE_SCENARIO_NAME}" in n for n in names), names
    for platform in base["platforms"]:
        assert not _repeats(platform), f"base config platform {platform['name']}"


def test_the_shape_is_systemd_as_pid_1():
    shape = _shape()
    assert shape["command"] == "/lib/systemd/systemd"
    assert SHAPE_CAPABILITY in shape["capabilities"]
    assert any(str(v).startswith(SHAPE_VOLUME) for v in shape["volumes"])
    assert {"/run", "/run/lock", "/tmp"} <= set(shape["tmpfs"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_does_not_repeat_the_container_shape(scenario):
    config = _load(ROOT / "molecule" / scenario / "molecule.yml")
    for platform in config.get("platforms", []):
        found = _repeats(platform)
        assert not found, (
            f"molecule/{scenario}/molecule.yml platform {platform.get('name')} repeats the "
            f"container shape or sets what molecule/common/create.yml does not apply: {found}"
        )
    # A scenario may not swap the shared create step for one of its own.
    playbooks = (config.get("provisioner") or {}).get("playbooks") or {}
    assert "create" not in playbooks, f"molecule/{scenario} overrides the create playbook"


def test_repeated_shape_is_caught():
    """The check above can fail: an entry as every scenario wrote it before."""
    old = {
        "name": "x",
        "image": "gpuhost/debian:12",
        "pre_build_image": True,
        "command": "/lib/systemd/systemd",
        "capabilities": ["SYS_ADMIN"],
        "cgroupns_mode": "host",
        "volumes": ["/sys/fs/cgroup:/sys/fs/cgroup:rw"],
        "tmpfs": ["/run", "/run/lock", "/tmp"],
        "groups": ["gpu_hosts"],
    }
    assert len(_repeats(old)) == 6
    assert _repeats({"name": "x", "image": "i", "capabilities": ["NET_ADMIN"]}) == []
