"""`sglang_server_profile: auto` and the model-fit check (plugin_utils/gpuhost_profile_fit.py).

The hosts are the recorded ones (tests/fixtures/gpu-hosts/): the real 1x and 2x H200 captures
and the made 8x RTX PRO 6000, 8x H100 and 4x L40S ones, read through the product's own
nvidia-smi parsers (gpuhost_fakes.FakeProbe replays the recorded command output). The profiles
are the library in profiles/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi import collect_gpu
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_pci_gpus import collect_pci_gpus
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile_fit as fit
from gpuhost_fakes import FIXTURES, load_fixture

ROOT = Path(__file__).resolve().parents[1]

LIBRARY = [(p.stem, yaml.safe_load(p.read_text())) for p in sorted(ROOT.glob("profiles/*.yml"))]


def host_gpu(name):
    """The gpuhost_gpu fact of a recorded host: facts.json where the run recorded one, else
    the recorded nvidia-smi output through the collector."""
    facts = FIXTURES / name / "facts.json"
    if facts.exists():
        return json.loads(facts.read_text())["gpuhost_gpu"]
    probe = load_fixture(name)
    pci, _ = collect_pci_gpus(probe)
    return collect_gpu(probe, pci_devices=pci)


# --- auto on every recorded host ------------------------------------------------------

EXPECTED = {
    "h200x1-real": "qwen3-32b-fp8-1x-80gb",
    "h200x2-real-preflight": "qwen3-30b-a3b-2x-80gb",
    "h200x2-nvlink-firecracker": "qwen3-30b-a3b-2x-80gb",
    "rtx-pro-6000x8-proxmox-p2p-ns": "glm5-nvfp4-8x-rtx-pro-6000",
    "h100x8-sxm-nvswitch": "glm46-fp8-8x-h100",
    "l40sx4-pcie-two-numa": "qwen3-30b-a3b-4x-48gb",
}


@pytest.mark.parametrize("host", sorted(EXPECTED))
def test_auto_picks_the_right_profile_on_every_recorded_host(host):
    chosen = fit.select(LIBRARY, host_gpu(host))
    assert chosen["selected"] == EXPECTED[host], chosen["message"]
    # Every profile before it in the list was turned down, each with its reason.
    names = [c["name"] for c in chosen["considered"]]
    for earlier in chosen["considered"][: names.index(EXPECTED[host])]:
        assert not earlier["ok"] and earlier["reasons"], earlier


def test_auto_turns_down_the_big_profiles_for_the_right_reason():
    considered = {
        c["name"]: c for c in fit.select(LIBRARY, host_gpu("h100x8-sxm-nvswitch"))["considered"]
    }
    assert any("built for SM120" in r for r in considered["glm5-nvfp4-8x-rtx-pro-6000"]["reasons"])
    # DeepSeek-V3 FP8 is 8 GPUs of SM90 as asked, but 80 GB cards are too small for it.
    assert considered["deepseek-v3-fp8-8x-h200"]["reasons"] == [
        "needs >= 135 GiB per GPU, this host's have 79.6 GiB",
        "weights do not fit: weights 641.0 GiB (the profile's weights_gib) / 8 GPU(s) = 80.1 GiB "
        "per GPU; pool 79.6 GiB x --mem-fraction-static 0.85 = 67.7 GiB per GPU; the weights "
        "alone are 12.5 GiB over the pool",
    ]


def test_auto_before_the_driver_is_loaded_goes_by_the_pci_ids():
    # A bare host: preflight runs before role nvidia_driver, nvidia-smi is not there yet.
    gpu = host_gpu("no-driver-rtx-pro-6000x8")
    assert not gpu["driver"]["loaded"]
    chosen = fit.select(LIBRARY, gpu)
    assert chosen["selected"] == "glm5-nvfp4-8x-rtx-pro-6000"
    assert "known from the PCI ids: no driver loaded yet" in chosen["message"]
    assert (
        chosen["gpus"]["memory_gib"]
        == fit.measured(host_gpu("rtx-pro-6000x8-proxmox-p2p-ns"))["memory_gib"]
    )


def _driverless(*device_ids):
    return {
        "present": True,
        "driver": {"loaded": False},
        "count": len(device_ids),
        "pci_devices": [
            {"bus_id": f"0000:{i + 1:02x}:00.0", "device_id": d} for i, d in enumerate(device_ids)
        ],
    }


def test_auto_without_a_measured_gpu_names_the_way_out():
    chosen = fit.select(LIBRARY, {"present": False, "driver": {"loaded": False}, "count": 0})
    assert chosen["selected"] is None
    assert "none was measured" in chosen["message"]
    assert "glm5-nvfp4-8x-rtx-pro-6000" in chosen["message"]


def test_auto_with_an_unknown_pci_id_names_the_id():
    # One unknown card among known ones is enough to know nothing (the smallest GPU counts).
    chosen = fit.select(LIBRARY, _driverless("10de:2bb5", "10DE:FFFF", "10de:fffe", "10de:ffff"))
    assert chosen["selected"] is None
    assert chosen["gpus"] is None
    assert "the PCI id(s) 10de:fffe, 10de:ffff are not among the GPUs" in chosen["message"]
    assert "10de:2bb5" in chosen["message"]  # the known ids are listed, not reported unknown
    assert "glm5-nvfp4-8x-rtx-pro-6000" in chosen["message"]
    assert fit.unknown_pci_ids(_driverless("10de:2335")) == []
    # With the driver loaded nvidia-smi measures; PCI ids do not matter.
    assert fit.unknown_pci_ids({**_driverless("10de:ffff"), "driver": {"loaded": True}}) == []


@pytest.mark.parametrize(
    "device_id, name",
    [
        ("10de:2bb1", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
        ("10de:2bb4", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"),
        ("10de:2bb5", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
    ],
)
def test_auto_on_driverless_rtx_pro_6000_workstation_cards(device_id, name):
    """The Workstation and Max-Q Workstation cards (10de:2bb1, 10de:2bb4) are the 96 GB GB202
    class of the Server Edition: 8 of them pick the RTX PRO 6000 profile before any driver."""
    chosen = fit.select(LIBRARY, _driverless(*[device_id] * 8))
    assert chosen["selected"] == "glm5-nvfp4-8x-rtx-pro-6000", chosen["message"]
    assert chosen["gpus"]["names"] == [name]
    assert chosen["gpus"]["sms"] == [120]
    server = fit.measured(_driverless("10de:2bb5"))
    assert chosen["gpus"]["memory_gib"] == server["memory_gib"] == 95.6
    assert "known from the PCI ids: no driver loaded yet" in chosen["message"]


def test_auto_when_nothing_fits_lists_every_profile_and_why():
    small = {
        "present": True,
        "driver": {"loaded": True},
        "count": 1,
        "gpus": [{"name": "NVIDIA A10", "compute_capability": "8.6", "memory_total_mib": 23028}],
    }
    chosen = fit.select(LIBRARY, small)
    assert chosen["selected"] is None
    message = chosen["message"]
    assert message.startswith("sglang_server_profile: auto found no profile for 1x NVIDIA A10")
    for name, _doc in fit.auto_order(LIBRARY):
        assert f"{name}: " in message
    assert "qwen3-8b-1x-48gb: needs >= 44 GiB per GPU, this host's have 22.5 GiB" in message


def test_auto_order_is_the_one_the_docs_show():
    # docs/profiles.md "### The profile library": the section ends at the next heading.
    doc = (ROOT / "docs" / "profiles.md").read_text()
    section = re.split(r"\n#{1,3} ", doc.split("### The profile library", 1)[1], maxsplit=1)[0]
    listed = re.findall(r"^\| \d+ \| `([a-z0-9.-]+)` \|", section, flags=re.MULTILINE)
    assert listed == [name for name, _doc in fit.auto_order(LIBRARY)]


def test_several_fit_and_the_first_in_order_wins():
    # 8x H200 class: DeepSeek-V3 (order 30) and GLM-4.6 (40) and the Qwen ones all fit.
    h200x8 = {
        "present": True,
        "driver": {"loaded": True},
        "count": 8,
        "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0", "memory_total_mib": 143771}]
        * 8,
    }
    chosen = fit.select(LIBRARY, h200x8)
    fits = [c["name"] for c in chosen["considered"] if c["ok"]]
    assert fits[:2] == ["deepseek-v3-fp8-8x-h200", "glm46-fp8-8x-h100"]
    assert chosen["selected"] == "deepseek-v3-fp8-8x-h200"


# --- the model-fit check: fits, weights do not fit, KV room does not fit ----------------

ONE_H200 = fit.measured(host_gpu("h200x1-real"))


def _profile(weights_gib, kv_min, fraction=0.9, tp=1):
    return {
        "tp_size": tp,
        "flags": {"--mem-fraction-static": fraction},
        "weights_gib": weights_gib,
        "kv_cache_min_gib": kv_min,
    }


def test_fit_fits_and_says_the_numbers():
    result = fit.fit(_profile(32, 16), ONE_H200)
    assert result["ok"] and result["reasons"] == []
    assert result["numbers"]["pool_per_gpu_gib"] == 126.4  # 140.4 x 0.9
    assert result["numbers"]["kv_room_per_gpu_gib"] == 94.4
    assert "KV-cache room 94.4 GiB per GPU (needs 16)" in result["lines"][0]


def test_fit_fails_by_weights_naming_the_numbers():
    result = fit.fit(_profile(130, 1), ONE_H200)
    assert not result["ok"]
    assert result["reasons"] == [
        "weights do not fit: weights 130.0 GiB (the profile's weights_gib) / 1 GPU(s) = 130.0 GiB "
        "per GPU; pool 140.4 GiB x --mem-fraction-static 0.9 = 126.4 GiB per GPU; the weights "
        "alone are 3.6 GiB over the pool"
    ]


def test_fit_fails_by_kv_room_naming_the_numbers():
    result = fit.fit(_profile(110, 20), ONE_H200)
    assert not result["ok"]
    (reason,) = result["reasons"]
    assert reason.startswith("no room for the KV cache: weights 110.0 GiB")
    assert "16.4 GiB left per GPU, the profile needs kv_cache_min_gib 20" in reason


def test_fit_prefers_a_measured_size_and_shards_it_over_tp():
    two = fit.measured(host_gpu("h200x2-real-preflight"))
    measured = {"bytes": 200 * fit.GIB, "source": "the hub's file list at abc"}
    result = fit.fit(_profile(1, 4, tp=2), two, measured)
    assert result["ok"]
    assert result["numbers"]["weights_per_gpu_gib"] == 100.0
    assert result["numbers"]["weights_source"] == "the hub's file list at abc"
    # The same size on one GPU does not fit: the measured size decided, not weights_gib 1.
    result = fit.fit(_profile(1, 4, tp=1), two, measured)
    assert not result["ok"] and "the hub's file list at abc" in result["reasons"][0]


def test_fit_assumes_a_fraction_only_when_the_profile_sets_none_and_says_so():
    doc = {"tp_size": 1, "flags": {}, "weights_gib": 10, "kv_cache_min_gib": 1}
    result = fit.fit(doc, ONE_H200)
    assert result["numbers"]["mem_fraction_static"] == fit.ASSUMED_MEM_FRACTION
    assert "(assumed: the profile sets none)" in result["lines"][0]


def test_fit_without_a_size_checks_only_count_and_architecture():
    result = fit.fit({"tp_size": 2, "flags": {}, "requires": {"sm": [120]}}, ONE_H200)
    assert result["reasons"] == [
        "needs 2 GPU(s) (TP 2 x PP 1), this host has 1",
        "built for SM120, this host's GPUs are SM90 (NVIDIA H200)",
    ]
    assert "weights' size unknown" in result["lines"][0]


def test_an_inventory_model_drops_the_profiles_sizes():
    doc = dict(LIBRARY)["qwen3-8b-1x-48gb"]
    own = profile.resolve(doc, {"model": "someone/other-model"})
    assert "weights_gib" not in own and own["requires"] == doc["requires"]
    same = profile.resolve(doc, {})
    assert same["weights_gib"] == doc["weights_gib"]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"requires": "8 GPUs"}, "requires: got '8 GPUs'; allowed: a mapping"),
        ({"requires": {"gpus": 0}}, "requires.gpus: got 0; allowed: a number >= 1"),
        ({"requires": {"sm": "90"}}, "requires.sm: got '90'; allowed: a list of SM numbers"),
        ({"weights_gib": "big"}, "weights_gib: got 'big'; allowed: a number >= 0"),
        ({"auto_order": "first"}, "auto_order: got 'first'; allowed: an integer"),
    ],
)
def test_profile_fit_keys_are_checked(doc, expected):
    problems = fit.doc_problems("x", doc)
    assert problems and expected in problems[0]


def test_every_library_profile_has_well_formed_fit_keys():
    for name, doc in LIBRARY:
        assert fit.doc_problems(name, doc) == [], name
        assert isinstance(doc.get("auto_order"), int), name
        assert doc.get("weights_gib") and doc.get("requires"), name


def test_auto_when_the_memory_is_not_reported_goes_by_count_and_architecture():
    # The shape of molecule/sglang_server/fixtures/facts-rtx-pro-6000x8.yml: no memory_total_mib.
    gpu = host_gpu("rtx-pro-6000x8-proxmox-p2p-ns")
    gpu["gpus"] = [{k: v for k, v in g.items() if k != "memory_total_mib"} for g in gpu["gpus"]]
    chosen = fit.select(LIBRARY, gpu)
    assert chosen["selected"] == "glm5-nvfp4-8x-rtx-pro-6000"
    assert "(? GiB, SM120)" in chosen["message"]
    assert "GPU memory not reported" in chosen["considered"][0]["lines"][0]
