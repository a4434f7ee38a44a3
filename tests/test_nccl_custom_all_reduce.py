"""SGLang's custom all-reduce judged for the server's TP group (gpuhost_nccl_car.py), on the
recorded hosts of tests/fixtures/gpu-hosts: the real 2x H200 and 1x H200 preflight facts, and
the made 8x RTX PRO 6000 (P2P NS), 8x H100 NVSwitch and 4x L40S captures read through the
real parsers (gpuhost_fakes.FakeProbe answers from those files: no GPU is reachable here).

The rule is SGLang's, read from the pinned wheels (0.5.10.post1 and 0.5.23):
custom_all_reduce_utils.py can_use_custom_all_reduce_with_nvlink and
custom_all_reduce.py CustomAllreduce._SUPPORTED_WORLD_SIZES (see the module's docstring)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import collect_host
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi import collect_gpu
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_pci_gpus import collect_pci_gpus
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl as nccl
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_car as car
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile
from gpuhost_fakes import FIXTURES, load_fixture

ROOT = Path(__file__).resolve().parents[1]

PINNED = "0.5.10.post1"
NEWER = "0.5.23"


def recorded(name):
    """gpuhost_gpu / gpuhost_host of a fixture host: real facts.json, or the captures parsed."""
    real = FIXTURES / name / "facts.json"
    if real.exists():
        facts = json.loads(real.read_text())
        return facts["gpuhost_gpu"], facts["gpuhost_host"]
    probe = load_fixture(name, disks={"/": (500, 1000)})
    pci, _ = collect_pci_gpus(probe)
    return collect_gpu(probe, pci_devices=pci), collect_host(probe, ["/var/cache/gpuhost"])


def decision(name, overrides=None):
    gpu, host = recorded(name)
    return nccl.decide(nccl.input_from_facts(gpu, host, "2.28.9"), overrides)


def server(name, tp, layout=None, env=None, version=PINNED, overrides=None):
    return car.for_server(decision(name, overrides), tp, layout, env, version)


# --- what the decision records per host ---------------------------------------------------


def test_links_of_the_real_h200_pair():
    d = decision("h200x2-real-preflight")
    assert d["gpu_links"] == [["X", "nvlink"], ["nvlink", "X"]]
    assert d["disable_custom_all_reduce"] is False
    (why,) = [r for r in d["reasons"] if r["variable"] == "disable_custom_all_reduce"]
    assert "TP 2 on GPUs 0,1, NVLink between every pair" in why["reason"]
    assert "can_use_custom_all_reduce_with_nvlink" in why["source"]
    assert "REFERENCE" not in why["source"]


def test_links_of_the_l40s_host_follow_the_numa_split():
    d = decision("l40sx4-pcie-two-numa")
    # topo -p2p r/w: OK inside a socket, CNS across (the recording).
    assert d["gpu_links"] == [
        ["X", "p2p", "none", "none"],
        ["p2p", "X", "none", "none"],
        ["none", "none", "X", "p2p"],
        ["none", "none", "p2p", "X"],
    ]
    # The host-wide value is for TP 4 on all four GPUs: some pairs have no P2P.
    assert d["disable_custom_all_reduce"] is True


def test_links_of_the_other_recordings():
    assert {c for row in decision("h100x8-sxm-nvswitch")["gpu_links"] for c in row} == {
        "X",
        "nvlink",
    }
    assert {c for row in decision("rtx-pro-6000x8-proxmox-p2p-ns")["gpu_links"] for c in row} == {
        "X",
        "none",
    }
    single = decision("h200x1-real")
    assert single["gpu_links"] == [["X"]] and single["disable_custom_all_reduce"] is False


# --- TP 2 on a bigger host: the pair's facts decide, not the host's GPU count ------------


def test_tp2_on_the_l40s_pair_with_p2p_keeps_custom_all_reduce():
    got = server("l40sx4-pcie-two-numa", 2)
    assert got["disable"] is False, got
    assert got["groups"] == [[0, 1]]
    assert "P2P over PCIe" in got["reason"]


@pytest.mark.parametrize(
    ("layout", "env", "group"),
    [
        ({}, {"CUDA_VISIBLE_DEVICES": "1,2"}, [1, 2]),
        ({"--base-gpu-id": 1}, {}, [1, 2]),
        ({"--gpu-id-step": 2}, {}, [0, 2]),
    ],
)
def test_tp2_on_an_l40s_pair_across_sockets_turns_it_off(layout, env, group):
    got = server("l40sx4-pcie-two-numa", 2, layout, env)
    assert got["disable"] is True, got
    assert got["groups"] == [group]
    assert f"GPUs {group[0]} and {group[1]} of the TP group" in got["reason"]
    assert "no P2P in the driver" in got["reason"]


def test_tp2_on_the_second_l40s_pair_by_visible_devices_or_base_gpu():
    by_env = server("l40sx4-pcie-two-numa", 2, env={"CUDA_VISIBLE_DEVICES": "3,2"})
    assert (by_env["disable"], by_env["groups"]) == (False, [[3, 2]])
    # --base-gpu-id 2: the group is 2,3; SGLang's P2P probe looks at 0,1, which have P2P too.
    by_flag = server("l40sx4-pcie-two-numa", 2, {"--base-gpu-id": "2"})
    assert (by_flag["disable"], by_flag["groups"]) == (False, [[2, 3]])


def test_every_tp_group_counts_pipeline_and_data_parallel():
    pp = server("l40sx4-pcie-two-numa", 2, {"--pp-size": 2})
    assert (pp["disable"], pp["groups"]) == (False, [[0, 1], [2, 3]])
    dp = server("l40sx4-pcie-two-numa", 2, {"--dp-size": 2})
    assert (dp["disable"], dp["groups"]) == (False, [[0, 1], [2, 3]])
    # DP attention shares one TP group of all four GPUs.
    dpa = server("l40sx4-pcie-two-numa", 4, {"--dp-size": 2, "--enable-dp-attention": True})
    assert dpa["groups"] == [[0, 1, 2, 3]] and dpa["disable"] is True


def test_the_group_decides_where_sglang_probes_other_gpus():
    # --base-gpu-id 1: the group is 1,2 (no P2P), but SGLang probes P2P on its devices 0,1
    # (can_p2p(rank, world_size)), which pass; a pair needs no NVLink, so SGLang alone would
    # run custom all-reduce on 1,2. The flag is what keeps it off.
    got = server("l40sx4-pcie-two-numa", 2, {"--base-gpu-id": 1})
    assert (got["disable"], got["groups"]) == (True, [[1, 2]])
    # The other way round: the group 2,3 has P2P, the probed devices 0,2 have none, so SGLang
    # turns it off itself; the record says so.
    probed = server(
        "l40sx4-pcie-two-numa", 2, {"--base-gpu-id": 1}, {"CUDA_VISIBLE_DEVICES": "0,2,3"}
    )
    assert (probed["disable"], probed["groups"]) == (True, [[2, 3]])
    assert probed["reason"].startswith("SGLang's P2P probe looks at GPUs [0, 2]")


def test_tp2_on_the_pro6000_vm_without_p2p():
    got = server("rtx-pro-6000x8-proxmox-p2p-ns", 2)
    assert got["disable"] is True and "no P2P in the driver" in got["reason"]
    assert server("rtx-pro-6000x8-proxmox-p2p-ns", 8)["disable"] is True


def test_tp2_and_more_on_the_h100_nvswitch():
    for tp in (2, 4, 6, 8):
        got = server("h100x8-sxm-nvswitch", tp)
        assert got["disable"] is False, (tp, got)
        assert got["groups"] == [list(range(tp))]
        assert "NVLink between every pair" in got["reason"]
    picked = server("h100x8-sxm-nvswitch", 2, env={"CUDA_VISIBLE_DEVICES": "6,7"})
    assert (picked["disable"], picked["groups"]) == (False, [[6, 7]])


def test_odd_tp_on_nvswitch_differs_between_the_pinned_versions():
    # 0.5.10.post1: CustomAllreduce only (world sizes 2, 4, 6, 8).
    old = server("h100x8-sxm-nvswitch", 3, version=PINNED)
    assert old["disable"] is True
    assert (
        "TP 3: SGLang 0.5.10.post1 builds custom all-reduce only for TP [2, 4, 6, 8]"
        in (old["reason"])
    )
    # 0.5.23: CustomAllReduceV2 first, world sizes 2..8 with full NVLink.
    new = server("h100x8-sxm-nvswitch", 3, version=NEWER)
    assert new["disable"] is False, new
    # Without full NVLink V2 does not apply: the PCIe rule of both versions.
    assert server("l40sx4-pcie-two-numa", 3, version=NEWER)["disable"] is True


def test_tp2_on_the_real_h200_pair_and_tp1_everywhere():
    assert server("h200x2-real-preflight", 2)["disable"] is False
    assert server("h200x2-real-preflight", 2, env={"CUDA_VISIBLE_DEVICES": "1,0"})["disable"] is (
        False
    )
    for name in (
        "h200x1-real",
        "h200x2-real-preflight",
        "rtx-pro-6000x8-proxmox-p2p-ns",
        "l40sx4-pcie-two-numa",
    ):
        got = server(name, 1)
        assert got["disable"] is False, (name, got)
        assert "world size 1" in got["reason"]


def test_pcie_only_groups_of_four_are_off_even_with_p2p():
    gpu, host = recorded("l40sx4-pcie-two-numa")
    for row in ("read", "write"):
        gpu["p2p"][row] = [["X" if i == j else "OK" for j in range(4)] for i in range(4)]
    d = nccl.decide(nccl.input_from_facts(gpu, host, "2.28.9"))
    assert {c for row in d["gpu_links"] for c in row} == {"X", "p2p"}
    got = car.for_server(d, 4, {}, {}, PINNED)
    assert got["disable"] is True
    assert "more than two PCIe-only GPUs" in got["reason"]
    assert car.for_server(d, 2, {}, {"CUDA_VISIBLE_DEVICES": "0,3"}, PINNED)["disable"] is False


# --- what is not modelled, or not known, is conservative and says why --------------------


@pytest.mark.parametrize(
    ("tp", "layout", "env", "message"),
    [
        (2, {}, {"CUDA_VISIBLE_DEVICES": ""}, "CUDA sees no GPU"),
        (2, {}, {"CUDA_VISIBLE_DEVICES": "GPU-1234,GPU-5678"}, "other than an index"),
        (2, {}, {"CUDA_VISIBLE_DEVICES": "0,9"}, "distinct GPUs 0..3"),
        (2, {"--base-gpu-id": 3}, {}, "beyond the 4 visible"),
        (4, {"--nnodes": 2}, {}, "spans 2 nodes"),
        ("two", {}, {}, "not all integers"),
        (2, {"--gpu-id-step": 0}, {}, "out of range"),
    ],
)
def test_layouts_that_cannot_be_judged_turn_it_off(tp, layout, env, message):
    got = server("l40sx4-pcie-two-numa", tp, layout, env)
    assert got["disable"] is True
    assert message in got["reason"]


def test_pipeline_across_nodes_keeps_the_local_tp_group():
    got = server("l40sx4-pcie-two-numa", 2, {"--nnodes": 2, "--pp-size": 2})
    assert (got["disable"], got["groups"]) == (False, [[0, 1]])


def test_unknown_topology_is_not_p2p():
    gpu, host = recorded("l40sx4-pcie-two-numa")
    gpu.pop("p2p")
    d = nccl.decide(nccl.input_from_facts(gpu, host, "2.28.9"))
    got = car.for_server(d, 2, {}, {}, PINNED)
    assert got["disable"] is True and "P2P unknown" in got["reason"]


def test_override_wins_and_old_decisions_keep_their_value():
    forced = server(
        "h100x8-sxm-nvswitch", 2, overrides={"disable_custom_all_reduce": True}, version=PINNED
    )
    assert forced == {"disable": True, "reason": "overridden in nccl_env_overrides", "groups": []}
    released = server(
        "rtx-pro-6000x8-proxmox-p2p-ns", 2, overrides={"disable_custom_all_reduce": False}
    )
    assert released["disable"] is False
    # A gpuhost_nccl fact recorded before gpu_links existed: its host-wide value stands.
    old = {"disable_custom_all_reduce": True, "reasons": []}
    assert car.for_server(old, 2, {}, {}, PINNED)["disable"] is True
    broken = {"disable_custom_all_reduce": False, "gpu_links": [["X", "maybe"]], "reasons": []}
    assert car.for_server(broken, 2, {}, {}, PINNED)["disable"] is False
    assert car.for_server(None, 2) is None
    assert car.for_server({"reasons": []}, 2) is None


# --- the consumer: role sglang_server's profile check ----------------------------------


def _validate(name, tp, version=PINNED, flags=None, env=None):
    gpu, _ = recorded(name)
    catalogue = json.loads((ROOT / "data" / "sglang" / f"catalogue-{version}.json").read_text())
    effective = profile.resolve(
        {"model": "org/model", "tp_size": tp, "flags": flags or {}, "env": env or {}}, {}
    )
    return profile.validate(
        effective,
        catalogue,
        gpu=gpu,
        nccl=decision(name),
        listen={"host": "127.0.0.1", "port": 30000, "api_key_set": False, "api_key_valid": True},
    )


def test_profile_check_follows_the_tp_group():
    on = _validate("l40sx4-pcie-two-numa", 2)
    assert "--disable-custom-all-reduce" not in on["flags"]
    assert "custom all-reduce left on by the nccl decision: TP 2 on GPUs 0,1" in "\n".join(
        on["notes"]
    )
    off = _validate("l40sx4-pcie-two-numa", 2, env={"CUDA_VISIBLE_DEVICES": "0,2"})
    assert off["flags"]["--disable-custom-all-reduce"] is True
    by_flag = _validate("l40sx4-pcie-two-numa", 2, flags={"--base-gpu-id": 1})
    assert by_flag["flags"]["--disable-custom-all-reduce"] is True
    whole = _validate("l40sx4-pcie-two-numa", 4)
    assert whole["flags"]["--disable-custom-all-reduce"] is True
    (finding,) = [f for f in whole["findings"] if f["check"].endswith("custom_all_reduce")]
    assert finding["message"].startswith("off (nccl: GPUs 0 and 2 of the TP group")


def test_profile_check_uses_the_catalogue_version():
    assert "--disable-custom-all-reduce" in _validate("h100x8-sxm-nvswitch", 3, PINNED)["flags"]
    assert "--disable-custom-all-reduce" not in _validate("h100x8-sxm-nvswitch", 3, NEWER)["flags"]
    assert "--disable-custom-all-reduce" not in _validate("h200x2-real-preflight", 2)["flags"]
