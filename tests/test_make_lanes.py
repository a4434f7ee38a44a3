"""make test's two lanes: every molecule scenario runs once, in one lane.

The Makefile starts the molecule lane with MOLECULE_LONG and the lane beside it with the lints,
pytest, rebuild-e2e and the demo; then both take the other scenarios from one shared list
(scripts/molecule-scenarios.sh --shared), each the next one not claimed yet. A scenario left
out would never run in CI and nothing would say so; one run by both lanes would run twice, side
by side, on the same container names. `make lanes` prints the split as make computes it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def lanes(*overrides: str) -> tuple[list[str], list[str]]:
    """(the molecule lane's own scenarios, the shared ones either lane takes)."""
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "lanes", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    molecule = re.search(r"^molecule lane:(.*)$", out, re.M).group(1).split()
    assert re.search(r"^beside lane: lint collection pytest rebuild-e2e demo$", out, re.M), out
    shared = re.search(r"^then either lane, whichever is free first:(.*)$", out, re.M)
    return molecule, shared.group(1).split()


def scenarios_in_makefile() -> list[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return re.search(r"^MOLECULE_SCENARIOS \?= (.*)$", text, re.M).group(1).split()


def test_every_scenario_folder_is_in_make_test():
    folders = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
    assert sorted(scenarios_in_makefile()) == folders


def test_each_scenario_is_the_molecule_lanes_or_shared_never_both():
    molecule, shared = lanes()
    assert molecule and shared
    assert sorted(molecule + shared) == sorted(scenarios_in_makefile())
    assert not set(molecule) & set(shared)
    # the shared list keeps MOLECULE_SCENARIOS' order (longest first)
    assert shared == [s for s in scenarios_in_makefile() if s in shared]


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


# A test double of molecule for the lane script only: it records which scenario it was asked
# for and by which lane, takes a moment as a scenario would, and fails the one named in
# MOLECULE_DOUBLE_FAIL.
MOLECULE_DOUBLE = """#!/bin/sh
# test double of molecule (tests/test_make_lanes.py): records `molecule test -s NAME`
[ "$1" = test ] && [ "$2" = -s ] || { echo "double: unexpected $*" >&2; exit 2; }
echo "$LANE $3" >> "$MOLECULE_DOUBLE_LOG"
sleep 0.4
[ "$3" != "${MOLECULE_DOUBLE_FAIL:-}" ]
"""


def run_shared_lanes(tmp_path, fail: str = "") -> tuple[list[int], list[tuple[str, str]]]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "molecule").write_text(MOLECULE_DOUBLE)
    (bindir / "molecule").chmod(0o755)
    claims = tmp_path / "claims"
    claims.mkdir()
    log = tmp_path / "calls.log"
    _, shared = lanes()
    procs = []
    for lane in ("a", "b"):
        env = {
            **os.environ,
            "PATH": f"{bindir}:{os.environ['PATH']}",
            "LANE": lane,
            "MOLECULE_DOUBLE_LOG": str(log),
            "MOLECULE_DOUBLE_FAIL": fail,
            "GPUHOST_STAGE_TALLY": str(tmp_path / "tally.tsv"),
            "GPUHOST_STAGE_LOGS": str(tmp_path / "stages"),
        }
        procs.append(
            subprocess.Popen(
                ["scripts/molecule-scenarios.sh", "--shared", str(claims), *shared],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    rcs = [p.wait(timeout=60) for p in procs]
    calls = [tuple(line.split()) for line in log.read_text().splitlines()]
    return rcs, calls


def test_shared_scenarios_run_once_each_spread_over_both_lanes(tmp_path):
    rcs, calls = run_shared_lanes(tmp_path)
    _, shared = lanes()
    assert rcs == [0, 0]
    assert sorted(name for _, name in calls) == sorted(shared)
    assert {lane for lane, _ in calls} == {"a", "b"}  # neither lane sat idle


def test_a_failed_shared_scenario_runs_again_in_its_lane_the_other_takes_the_rest(tmp_path):
    _, shared = lanes()
    rcs, calls = run_shared_lanes(tmp_path, fail=shared[0])
    names = [name for _, name in calls]
    assert names.count(shared[0]) == 2  # the first run and the run that tells a flake
    assert len({lane for lane, name in calls if name == shared[0]}) == 1
    assert sorted(set(names)) == sorted(shared)
    assert all(names.count(s) == 1 for s in shared[1:])
    assert sorted(rcs) == [0, 1]


def test_shared_without_its_claims_folder_is_refused(tmp_path):
    proc = subprocess.run(
        ["scripts/molecule-scenarios.sh", "--shared", str(tmp_path / "nope"), "verify"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "no such folder" in proc.stderr
