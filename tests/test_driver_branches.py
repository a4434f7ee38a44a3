"""NVIDIA driver branch knowledge (plugins/plugin_utils/gpuhost_driver_branches.py,
docs/driver-branches.md): which branches are supported and until when, the GPU generations the
open modules run, the CUDA lane; and the preflight stage giving the finding before any change."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_nvidia_driver import (
    driver_branch_finding as branch_filter,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_driver_branches import (
    BRANCHES,
    LANE_CUDA_MAJOR,
    driver_branch_finding,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("branch", "today", "status", "words"),
    [
        (580, "2026-12-04", "pass", "R580: long-term support branch, supported until 2028-06"),
        (595, "2026-12-04", "pass", "R595: production branch, supported until 2027-03"),
        (620, "2026-12-04", "pass", "R620: long-term support branch, supported until 2029-09"),
        # the last month of support is still supported; the month after is not
        (595, "2027-03-31", "pass", "supported until 2027-03"),
        (595, "2027-04-01", "warn", "past its end of life (2027-04-01)"),
        (580, "2028-07-01", "warn", "past its end of life"),
        # new feature branches and old branches are not listed
        (590, "2026-12-04", "warn", "590 is not one of NVIDIA's supported"),
        (570, "2026-12-04", "warn", "570 is not one of NVIDIA's supported"),
        ("5x0", "2026-12-04", "fail", "'5x0' is not a driver branch number"),
    ],
)
def test_branch_support(branch, today, status, words):
    found = driver_branch_finding(branch, today)
    assert found["check"] == "nvidia_driver.branch"
    assert found["status"] == status, found
    assert words in found["message"], found
    assert bool(found["fix"]) == (status != "pass")


def test_the_fix_names_the_long_term_branches():
    assert "580 or 620 (long-term support)" in driver_branch_finding(590, "2026-12-04")["fix"]
    assert "580 or 620" in driver_branch_finding(595, "2027-05-01")["fix"]


@pytest.mark.parametrize("arch", ["Volta", "Pascal", "Maxwell", "Kepler"])
def test_gpus_older_than_turing_fail_on_every_branch(arch):
    for branch in BRANCHES:
        found = driver_branch_finding(branch, "2026-12-04", ["Hopper", arch])
        assert found["status"] == "fail", found
        assert f"the host's {arch} GPUs cannot run the open kernel modules" in found["message"]
        assert ("R580 is their last branch" in found["message"]) == (arch != "Kepler")


@pytest.mark.parametrize("arch", ["Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"])
def test_open_module_generations_pass(arch):
    found = driver_branch_finding(620, "2026-12-04", [arch, "unknown"], "cu128")
    assert found["status"] == "pass"
    assert found["message"].endswith(f"on {arch}, CUDA 12 lane cu128")


def test_every_lane_runs_on_every_branch_and_a_newer_cuda_would_not(monkeypatch):
    for lane in LANE_CUDA_MAJOR:
        for branch in BRANCHES:
            assert driver_branch_finding(branch, "2026-12-04", [], lane)["status"] == "pass"
    monkeypatch.setitem(LANE_CUDA_MAJOR, "cu14", 14)
    found = driver_branch_finding(620, "2026-12-04", [], "cu14")
    assert found["status"] == "fail"
    assert "runs CUDA 13 at most; python_env_lane cu14 needs CUDA 14" in found["message"]


def test_the_table_covers_the_lanes_python_env_offers_and_the_default():
    spec = yaml.safe_load((ROOT / "roles/python_env/meta/argument_specs.yml").read_text())
    lanes = spec["argument_specs"]["main"]["options"]["python_env_lane"]["choices"]
    assert set(lanes) == set(LANE_CUDA_MAJOR)
    defaults = yaml.safe_load((ROOT / "roles/nvidia_driver/defaults/main.yml").read_text())
    assert BRANCHES[defaults["nvidia_driver_branch"]]["designation"] == "long-term support"


def test_the_doc_table_is_the_code_table():
    text = (ROOT / "docs/driver-branches.md").read_text()
    rows = re.findall(r"^\| (\d{3}) \| ([a-z -]+) \| (\d{4}-\d\d) \| (\d+) \|$", text, re.M)
    assert {int(b): (d, e, int(c)) for b, d, e, c in rows} == {
        b: (v["designation"], v["end_of_life"], v["cuda_major"]) for b, v in BRANCHES.items()
    }


def test_the_filter_reads_the_architectures_from_gpuhost_gpu():
    gpu = {"gpus": [{"architecture": "Volta"}, {"architecture": "Volta"}]}
    assert branch_filter(580, "2026-12-04", gpu, "cu128")["status"] == "fail"
    assert branch_filter("580", "2026-12-04", {}, "")["status"] == "pass"
    assert branch_filter(580, "2026-12-04", None)["status"] == "pass"
