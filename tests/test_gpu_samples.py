"""Which resource bounds a bench level (plugins/module_utils/gpuhost_gpu_samples.py), over
the real 1x H200 load capture (tests/fixtures/gpu-hosts/h200x1-day2/: a compute, a memory and
a PCIe phase, SOURCE.md) and the reference deployment's numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_gpu_samples as gs

DAY2 = Path(__file__).parent / "fixtures" / "gpu-hosts" / "h200x1-day2"
H200_LIMITS = {0: {"power_limit_w": 700.0, "sm_clock_max_mhz": 1980.0, "pcie_gen_max": 5,
                   "pcie_width_max": 16}}  # fmt: skip


def phase(start: str, end: str) -> list[dict]:
    """Samples of the real capture between two times (load-phases.txt), ramp seconds cut."""
    samples = gs.parse_dmon((DAY2 / "load-dmon.txt").read_text())["samples"]
    return [s for s in samples if start <= s["time"] < end]


def test_parse_real_dmon():
    parsed = gs.parse_dmon((DAY2 / "load-dmon.txt").read_text())
    assert not parsed["standin"]
    first = parsed["samples"][0]
    assert first["time"] == "17:01:30" and first["gpu"] == 0 and first["pwr"] == 80.0
    assert set(gs.COLUMNS) <= set(first)
    idle = gs.parse_dmon((DAY2 / "idle-dmon.txt").read_text())["samples"]
    assert len(idle) == 3 and idle[0]["time"] is None and idle[0]["sm"] == 0.0


def test_parse_limits():
    text = "0, 700.00, 1980, 5, 16\n1, 600.00, 1980, 4, 8\n"
    limits = gs.parse_limits(text)
    assert limits[0] == H200_LIMITS[0]
    assert limits[1]["pcie_gen_max"] == 4


@pytest.mark.parametrize(
    ("start", "end", "bound", "words"),
    [
        # bf16 matmuls: 690 of 700 W, power-capped all the time.
        ("17:01:38", "17:01:48", "power", ["= 99% of the 700 W limit", "power-capped 100%"]),
        # device-to-device copies: the memory controller busy all the time.
        ("17:01:49", "17:02:00", "memory_bandwidth", ["memory bandwidth 100%"]),
        # pinned host-to-device copies: ~59 GB/s of a Gen5 x16 link, 131 W.
        ("17:02:01", "17:02:12", "pcie", ["PCIe 6", "of 63 GB/s per direction"]),
    ],
)
def test_real_phases_name_their_bound(start, end, bound, words):
    verdict = gs.explain(gs.summarize(phase(start, end), H200_LIMITS))
    assert verdict["bound"] == bound, verdict
    for word in words:
        assert word in verdict["evidence"], verdict["evidence"]


def test_reference_deployment_is_not_bandwidth_or_power_bound():
    # The reference host's account: 100% utilisation at ~55% of the power limit, ~52% memory
    # bandwidth, ~1 GB/s PCIe (RTX PRO 6000 Blackwell: 600 W, Gen5 x16).
    samples = [
        {"time": None, "gpu": g, "pwr": 330.0, "gtemp": 60.0, "sm": 100.0, "mem": 52.0,
         "pclk": 2400.0, "mclk": 14000.0, "pviol": 0.0, "tviol": 0.0, "rxpci": 600.0,
         "txpci": 400.0}
        for g in range(8)
    ]  # fmt: skip
    limits = {g: {"power_limit_w": 600.0, "sm_clock_max_mhz": 2600.0, "pcie_gen_max": 5,
                  "pcie_width_max": 16} for g in range(8)}  # fmt: skip
    verdict = gs.explain(gs.summarize(samples, limits))
    assert verdict["bound"] == "latency"
    assert "power 330 W = 55% of the 600 W limit" in verdict["evidence"]
    assert "memory bandwidth 52%" in verdict["evidence"]
    assert "PCIe 1.0 GB/s" in verdict["evidence"]
    assert "all-reduce" in verdict["advice"] and "MoE" in verdict["advice"]


def test_idle_thermal_and_nothing():
    idle = [{"time": None, "gpu": 0, "pwr": 90.0, "sm": 20.0, "mem": 5.0, "pclk": 1980.0,
             "mclk": 3201.0, "gtemp": 40.0, "pviol": 0.0, "tviol": 0.0, "rxpci": 1.0,
             "txpci": 1.0}]  # fmt: skip
    assert gs.explain(gs.summarize(idle, H200_LIMITS))["bound"] == "idle"
    hot = [dict(idle[0], sm=99.0, tviol=1.0)]
    assert gs.explain(gs.summarize(hot, H200_LIMITS))["bound"] == "thermal"
    assert gs.explain([])["bound"] == "unknown"


def test_a_throttled_gpu_decides_for_the_group():
    fast = {"time": None, "gpu": 0, "pwr": 400.0, "sm": 100.0, "mem": 40.0, "pclk": 1980.0,
            "mclk": 3201.0, "gtemp": 50.0, "pviol": 0.0, "tviol": 0.0, "rxpci": 1.0,
            "txpci": 1.0}  # fmt: skip
    capped = dict(fast, gpu=1, sm=90.0, pviol=80.0)
    limits = {0: H200_LIMITS[0], 1: H200_LIMITS[0]}
    verdict = gs.explain(gs.summarize([fast, capped], limits))
    assert verdict["bound"] == "power" and verdict["gpu"] == 1


def test_standin_output_is_labelled():
    text = (
        "# STAND-IN nvidia-smi (test double): made numbers\n" + (DAY2 / "idle-dmon.txt").read_text()
    )
    assert gs.parse_dmon(text)["standin"] is True
