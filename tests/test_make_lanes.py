"""make test's two lanes: every molecule scenario runs, in exactly one lane.

The Makefile splits MOLECULE_SCENARIOS into the molecule lane (MOLECULE_LONG) and the lane
beside it (after pytest, rebuild-e2e and the demo). A scenario left out of both would never
run in CI and nothing would say so; one in both would run twice, side by side, on the same
container names. `make lanes` prints the split as make computes it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def lanes(*overrides: str) -> tuple[list[str], list[str]]:
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "lanes", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    molecule = re.search(r"^molecule lane:(.*)$", out, re.M).group(1).split()
    beside = re.search(r"^beside lane: pytest rebuild-e2e demo(.*)$", out, re.M).group(1).split()
    return molecule, beside


def scenarios_in_makefile() -> list[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return re.search(r"^MOLECULE_SCENARIOS \?= (.*)$", text, re.M).group(1).split()


def test_every_scenario_folder_is_in_make_test():
    folders = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
    assert sorted(scenarios_in_makefile()) == folders


def test_each_scenario_runs_in_exactly_one_lane():
    molecule, beside = lanes()
    assert molecule and beside
    assert sorted(molecule + beside) == sorted(scenarios_in_makefile())
    assert not set(molecule) & set(beside)


def test_the_lanes_follow_a_narrowed_scenario_list():
    assert lanes("MOLECULE_SCENARIOS=verify rolling_update") == (["rolling_update"], ["verify"])


@pytest.mark.parametrize("name", ["no_such_scenario", "../default", "default/../verify"])
def test_an_unknown_scenario_is_refused_before_molecule_runs(name):
    proc = subprocess.run(
        ["scripts/molecule-scenarios.sh", "verify", name],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"no molecule scenario '{name}'" in proc.stderr
    assert "==>" not in proc.stdout  # nothing ran, not even the known first one
