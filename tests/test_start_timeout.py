"""How long the health gate waits after a (re)start: gpuhost_profile.start_timeout.

A GLM-5 start takes 7-8 min with warm caches and longer on a first start, a small model
seconds: the gate's timeout follows the profile's expected start (start_seconds), so a slow
start is waited for and a broken small server fails in seconds. The wiring (the gate uses the
derived number) is proven by molecule/rolling_update: a stand-in that takes 60 s to load is
rolled out with sglang_server_start_timeout 0 although the scenario's fixed timeout is 20 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile

ROOT = Path(__file__).resolve().parents[1]


def test_the_expected_start_sets_the_timeout():
    seconds, source = profile.start_timeout(480)
    assert seconds == profile.START_TIMEOUT_FACTOR * 480 == 1920
    assert "480 s" in source


def test_the_inventory_number_wins_over_the_profile():
    assert profile.start_timeout(480, 60) == (60, "sglang_server_start_timeout")
    assert profile.start_timeout(0, "90") == (90, "sglang_server_start_timeout")


def test_nothing_known_keeps_the_long_default():
    seconds, source = profile.start_timeout(0, 0)
    assert seconds == profile.START_TIMEOUT_DEFAULT == 2700
    assert "default" in source
    assert profile.start_timeout(None, "")[0] == 2700


@pytest.mark.parametrize(
    ("start", "override", "named"),
    [
        (-5, 0, "start_seconds"),
        ("soon", 0, "start_seconds"),
        (0, -1, "sglang_server_start_timeout"),
        (0, "10m", "sglang_server_start_timeout"),
        (True, 0, "start_seconds"),
    ],
)
def test_bad_numbers_are_refused_by_name(start, override, named):
    with pytest.raises(profile.ProfileError) as err:
        profile.start_timeout(start, override)
    assert named in str(err.value)
    assert "whole number of seconds" in str(err.value)


def test_the_inventory_can_correct_the_profiles_expected_start():
    doc = {"model": "m", "start_seconds": 480}
    assert profile.resolve(doc, {})["start_seconds"] == 480
    assert profile.resolve(doc, {"start_seconds": 900})["start_seconds"] == 900
    assert profile.resolve({"model": "m"}, {})["start_seconds"] == 0


@pytest.mark.parametrize(
    "name", ["glm5-nvfp4-8x-rtx-pro-6000", "glm5-nvfp4-mtp-8x-rtx-pro-6000-fast"]
)
def test_glm5_profiles_wait_for_a_cold_start(name):
    # docs/reference.md §3: 7-8 min warm; a first start needs 30 min or more.
    doc = yaml.safe_load((ROOT / "profiles" / f"{name}.yml").read_text())
    assert 420 <= doc["start_seconds"] <= 480
    seconds, _ = profile.start_timeout(profile.resolve(doc, {})["start_seconds"])
    assert seconds >= 1800
