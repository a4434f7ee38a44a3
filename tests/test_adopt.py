"""The adopt classifier (plugins/plugin_utils/gpuhost_adopt.py, gpuhost_adopt_items.py) on the
reference deployment.

tests/fixtures/adopt/reference-glm5.json is the reference server (docs/reference.md §1) the
way the sglang_discover module reports it; the host is the recorded 8x RTX PRO 6000 Proxmox
VM without P2P (tests/fixtures/gpu-hosts/rtx-pro-6000x8-proxmox-p2p-ns). Every flag, variable
and package must come out classified as docs/adopt.md's table says, with the product's reason.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import collect_host
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi import collect_gpu
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_pci_gpus import collect_pci_gpus
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_python_env import lock_info
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_adopt as adopt
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_adopt_items as adopt_items
from gpuhost_fakes import load_fixture

ROOT = Path(__file__).resolve().parents[1]
SERVER = json.loads((ROOT / "tests" / "fixtures" / "adopt" / "reference-glm5.json").read_text())
SHA = SERVER["model"]["refs"]["main"]

# The reference deployment, classified (docs/adopt.md, "The worked example").
EXPECTED = {
    ("package", "sglang"): ("kept", "cu128"),
    ("package", "flashinfer-python"): ("kept", None),
    ("package", "torch"): ("kept", None),
    ("package", "sglang-kernel"): ("kept", None),
    ("flag", "--model-path"): ("kept", "sglang_server_model_id"),
    ("flag", "--tp"): ("kept", "sglang_server_tp_size"),
    ("flag", "--mem-fraction-static"): ("kept", None),
    ("flag", "--max-running-requests"): ("kept", None),
    ("flag", "--kv-cache-dtype"): ("changed", "bf16"),
    ("flag", "--quantization"): ("kept", None),
    ("flag", "--attention-backend"): ("kept", None),
    ("flag", "--fp8-gemm-backend"): ("dropped", None),
    ("flag", "--nsa-decode-backend"): ("dropped", None),
    ("flag", "--nsa-prefill-backend"): ("dropped", None),
    ("flag", "--moe-runner-backend"): ("kept", None),
    ("flag", "--disable-custom-all-reduce"): ("kept", "nccl"),
    ("flag", "--enable-flashinfer-allreduce-fusion"): ("dropped", None),
    ("flag", "--reasoning-parser"): ("kept", None),
    ("flag", "--tool-call-parser"): ("kept", None),
    ("flag", "--trust-remote-code"): ("kept", None),
    ("flag", "--host"): ("changed", "sglang_server_host"),
    ("flag", "--port"): ("kept", "sglang_server_port"),
    ("env", "CUDA_HOME"): ("kept", "sglang_server_cuda_home"),
    ("env", "HF_TOKEN"): ("changed", "model_cache_hf_token"),
    ("env", "NCCL_ALLOC_P2P_NET_LL_BUFFERS"): ("dropped", None),
    ("env", "NCCL_IB_DISABLE"): ("kept", "nccl"),
    ("env", "NCCL_MIN_NCHANNELS"): ("changed", "NCCL_MIN_CTAS=8"),
    ("env", "NCCL_P2P_LEVEL"): ("dropped", None),
    ("env", "OMP_NUM_THREADS"): ("kept", None),
    ("env", "SAFETENSORS_FAST_GPU"): ("kept", None),
}
# A phrase of the product's own reason each judgement must carry.
REASONS = {
    "--tp": "abbreviation of --tp-size",
    "--kv-cache-dtype": "FP8 KV gives garbled output on SM120",
    "--fp8-gemm-backend": "inert for an NVFP4 checkpoint",
    "--nsa-decode-backend": "only read with --attention-backend nsa/dsa",
    "--nsa-prefill-backend": "only read with --attention-backend nsa/dsa",
    "--enable-flashinfer-allreduce-fusion": "inert on SM120",
    "--disable-custom-all-reduce": "have no P2P in the driver",
    "--host": "non-loopback address, and sglang_server_api_key is empty",
    "NCCL_P2P_LEVEL": "the driver grants no P2P",
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS": "network transport only",
    "NCCL_IB_DISABLE": "no InfiniBand/RoCE device",
    "NCCL_MIN_NCHANNELS": "NCCL_MIN_CTAS from 2.17",
    "HF_TOKEN": "needs no token",
}


def facts(name):
    probe = load_fixture(name, disks={"/": (500, 1000)})
    pci, _ = collect_pci_gpus(probe)
    return collect_gpu(probe, pci_devices=pci), collect_host(probe, ["/var/cache/gpuhost"])


def library():
    return [
        (p.stem, yaml.safe_load(p.read_text())) for p in sorted((ROOT / "profiles").glob("*.yml"))
    ]


def catalogues():
    return {
        p.stem.removeprefix("catalogue-"): json.loads(p.read_text())
        for p in (ROOT / "data" / "sglang").glob("catalogue-*.json")
    }


def locks():
    out = {}
    for path in sorted((ROOT / "locks").glob("sglang-*-*.txt")):
        lane = path.stem.rsplit("-", 1)[1]
        out[lane] = lock_info(path.read_text(), path.name)["pins"]
    return out


def propose(server=SERVER, host="rtx-pro-6000x8-proxmox-p2p-ns", lane="cu128"):
    gpu, hostfacts = facts(host)
    return adopt.propose(server, gpu, hostfacts, library(), catalogues(), locks(), {"lane": lane})


@pytest.fixture(scope="module")
def reference():
    return propose()


def test_every_flag_variable_and_package_is_classified_as_the_docs_say(reference):
    got = {(i["kind"], i["name"]): (i["status"], i.get("to")) for i in reference["items"]}
    want = {k: v for k, v in EXPECTED.items()}
    assert {k: (s, t if want[k][1] else None) for k, (s, t) in got.items()} == want
    named = {n for n, _ in SERVER["flags"]} | set(SERVER["env"])
    assert {i["name"] for i in reference["items"] if i["kind"] != "package"} == named
    assert reference["counts"] == {"kept": 20, "dropped": 6, "changed": 4}


@pytest.mark.parametrize(("name", "phrase"), sorted(REASONS.items()))
def test_each_judgement_carries_the_products_reason(reference, name, phrase):
    reason = next(i["reason"] for i in reference["items"] if i["name"] == name)
    assert phrase in reason


def test_the_inventory_reproduces_the_server_on_the_reference_profile(reference):
    assert reference["profile"] == "glm5-nvfp4-8x-rtx-pro-6000"
    assert reference["inventory"] == {
        "python_env_lane": "cu128",
        "sglang_server_host": "0.0.0.0",
        "sglang_server_model_id": "lukealonso/GLM-5-NVFP4",
        "sglang_server_port": 8000,
        "sglang_server_profile": "glm5-nvfp4-8x-rtx-pro-6000",
        "sglang_server_revision": SHA,
        # SGLang serves the model path as its name when none is given; clients send it.
        "sglang_server_served_model_name": "lukealonso/GLM-5-NVFP4",
        "sglang_server_tp_size": 8,
    }
    assert any("sglang_server_api_key" in t for t in reference["todo"])
    assert any("ProtectHome=yes" in d for d in reference["differences"])
    assert any("port 8000" in d for d in reference["differences"])
    assert any("profile alone would serve it as glm-5" in d for d in reference["differences"])


def test_no_secret_or_value_of_one_is_carried(reference):
    text = json.dumps(reference)
    assert "<redacted>" not in json.dumps(reference["inventory"])
    assert "HF_TOKEN" not in json.dumps(reference["inventory"])
    assert text.count("<redacted>") == 1  # the HF_TOKEN item says it was present


def test_a_host_with_nvlink_p2p_judges_the_same_server_otherwise():
    server = copy.deepcopy(SERVER)
    server["flags"] = [f for f in server["flags"] if f[0] != "--tp"] + [["--tp-size", "2"]]
    got = {i["name"]: i for i in propose(server, "h200x2-nvlink-firecracker")["items"]}
    assert got["--disable-custom-all-reduce"]["status"] == "dropped"
    assert got["NCCL_P2P_LEVEL"]["status"] == "dropped"
    assert "NVLink" in got["NCCL_P2P_LEVEL"]["reason"]
    assert got["NCCL_MIN_NCHANNELS"]["to"] == "NCCL_MIN_CTAS=32"


def test_an_api_key_keeps_the_open_listener_and_asks_for_the_same_key():
    server = copy.deepcopy(SERVER)
    server["flags"].append(["--api-key", "<redacted>"])
    got = propose(server)
    items = {i["name"]: i for i in got["items"]}
    assert items["--host"]["status"] == "kept"
    assert any("sglang_server_firewall_cidrs" in t for t in got["todo"])
    assert items["--api-key"]["status"] == "changed"
    assert items["--api-key"]["to"] == "sglang_server_api_key"
    assert "sglang_server_api_key" not in got["inventory"]


def test_what_the_host_could_not_read_is_said_in_the_file():
    from gpuhost.commands.adopt import render

    server = copy.deepcopy(SERVER)
    server["problems"] = ["/home/ml/ml-env/lib: a symbolic link a user could have made"]
    got = propose(server)
    assert got["not_read"] == server["problems"]
    assert "# - /home/ml/ml-env/lib: a symbolic link a user could have made" in render("g", got)
    assert propose()["not_read"] == []


def test_a_listen_flag_is_named_as_the_server_spelled_it():
    server = copy.deepcopy(SERVER)
    server["flags"] = [["--ho", v] if f == "--host" else [f, v] for f, v in server["flags"]]
    got = propose(server)
    items = {i["name"]: i for i in got["items"]}
    assert (
        items["--ho"]["status"] == "changed" and got["inventory"]["sglang_server_host"] == "0.0.0.0"
    )
    assert "--host" not in items


def test_an_unknown_flag_and_an_unknown_nccl_variable():
    server = copy.deepcopy(SERVER)
    server["flags"] += [["--no-such-flag", "1"], ["--chunked-prefill-size", "8192"]]
    server["env"]["NCCL_DEBUG"] = "INFO"
    got = propose(server)
    items = {i["name"]: i for i in got["items"]}
    assert items["--no-such-flag"]["status"] == "dropped"
    assert "not a flag of sglang 0.5.10.post1" in items["--no-such-flag"]["reason"]
    assert items["--chunked-prefill-size"]["status"] == "kept"
    assert got["inventory"]["sglang_server_flags"] == {"--chunked-prefill-size": 8192}
    assert got["inventory"]["nccl_env_overrides"] == {"NCCL_DEBUG": "INFO"}


def test_a_version_no_lock_pins_changes_the_lane_and_names_the_pins():
    server = copy.deepcopy(SERVER)
    server["versions"]["sglang"] = "0.5.9"
    proposal = propose(server)
    assert "python_env_lane" not in proposal["inventory"]
    got = {i["name"]: i for i in proposal["items"]}
    assert got["sglang"]["status"] == "changed"
    assert got["sglang"]["to"] == "0.5.10.post1"
    assert "no lock under locks/ pins sglang 0.5.9" in got["sglang"]["reason"]


def test_the_cu13_lane_refuses_the_old_nsa_names_with_the_validators_text():
    server = copy.deepcopy(SERVER)
    server["versions"]["sglang"] = "0.5.23"
    got = {i["name"]: i for i in propose(server, lane="cu13")["items"]}
    assert got["sglang"] == {**got["sglang"], "status": "kept", "to": "cu13"}
    assert got["--nsa-decode-backend"]["status"] == "dropped"
    assert "renamed --dsa-decode-backend" in got["--nsa-decode-backend"]["reason"]


def test_a_lane_without_a_catalogue_is_refused_naming_the_lane():
    gpu, host = facts("rtx-pro-6000x8-proxmox-p2p-ns")
    with pytest.raises(adopt.AdoptError, match="python_env_lane: lane 'cu128' pins sglang"):
        adopt.propose(SERVER, gpu, host, library(), {}, locks(), {"lane": "cu128"})


def test_the_same_repository_under_another_owner_takes_the_profile_with_its_model():
    server = copy.deepcopy(SERVER)
    server["flags"] = [
        ["--model-path", "zai-org/GLM-5-NVFP4"] if f[0] == "--model-path" else f
        for f in server["flags"]
    ]
    got = propose(server)
    assert got["profile"] == "glm5-nvfp4-8x-rtx-pro-6000"
    assert got["inventory"]["sglang_server_model_id"] == "zai-org/GLM-5-NVFP4"


def test_a_model_no_profile_serves_is_proposed_inline():
    server = copy.deepcopy(SERVER)
    server["flags"] = [
        ["--model-path", "someone/Other-Model"] if f[0] == "--model-path" else f
        for f in server["flags"]
    ]
    got = propose(server)
    assert got["profile"] == "" and got["inventory"]["sglang_server_profile"] == ""
    assert got["inventory"]["sglang_server_flags"]["--reasoning-parser"] == "glm45"


def test_the_host_vars_file_is_the_inventory_and_a_value_cannot_add_a_setting():
    """`gpuhost adopt` writes the proposal under a comment that quotes the host's strings: a
    line break in one must not end the comment and add a setting of its own."""
    from gpuhost.commands.adopt import render

    server = copy.deepcopy(SERVER)
    server["flags"].append(["--chunked-prefill-size", "1\nsglang_server_api_key: planted"])
    server["env"]["SGLANG_X"] = "a\u2028sglang_server_host: 1.2.3.4"
    server["venv"] = "/home/ml/env\x85sglang_server_port: 1"
    got = propose(server)
    text = render("gpu1", got)
    assert yaml.safe_load(text) == got["inventory"]
    assert "\\x0asglang_server_api_key: planted" in text
    assert "a\\x2028sglang_server_host" in text
    assert "/home/ml/env\\x85sglang_server_port: 1" in text
    assert got["inventory"]["sglang_server_extra_env"] == {
        "SGLANG_X": "a\u2028sglang_server_host: 1.2.3.4"  # a value; provision's validator judges it
    }
    lines = text.split("\n---\n")[0].splitlines()
    assert all(line.startswith("#") for line in lines)
    assert len([i for i in got["items"] if i["name"] == "--chunked-prefill-size"]) == 1


def test_sglangs_default_port_is_kept_explicitly_and_a_local_model_asks_to_be_moved():
    server = copy.deepcopy(SERVER)
    server["flags"] = [f for f in server["flags"] if f[0] not in ("--port", "--model-path")]
    server["flags"].append(["--model-path", "/home/ml/models/glm5"])
    server["model"] = {"id": "/home/ml/models/glm5", "kind": "local", "revision": None}
    got = propose(server)
    assert got["inventory"]["sglang_server_port"] == 30000
    assert "sglang_server_revision" not in got["inventory"]
    assert any("model_cache_prestaged_path" in t for t in got["todo"])


def test_what_adopt_says_the_unit_sets_is_in_the_units_env_file():
    template = (ROOT / "roles" / "sglang_server" / "templates" / "sglang-server.env.j2").read_text()
    for name, value in adopt_items.UNIT_ENV.items():
        assert f"\n{name}={value}\n" in template
    for name in adopt_items.HUB_CACHE_ENV[:1]:
        assert f"\n{name}=" in template


def test_the_models_lock_pin_is_the_branch_asked_for_and_the_commit_served(reference):
    assert reference["lock_pin"] == {
        "model": "lukealonso/GLM-5-NVFP4",
        "branch": "main",
        "sha": SHA,
    }
    # A server that asked for a commit needs no pin; a local path has none either.
    server = copy.deepcopy(SERVER)
    server["model"]["revision"] = SHA
    assert propose(server)["lock_pin"] == {}
    server["model"]["kind"] = "local"
    assert propose(server)["lock_pin"] == {}


def test_a_cutover_records_the_pin_in_the_models_lock_and_an_earlier_pin_wins(tmp_path):
    from gpuhost.commands import adopt as command
    from gpuhost.plugin_code import plugin_utils

    lock = plugin_utils("gpuhost_models_lock", ROOT)
    path = tmp_path / "models.lock.yml"
    pin = {"model": "owner/m", "branch": "main", "sha": "a" * 40}
    proposals = {
        "h1": {"lock_pin": pin},
        "h2": {"lock_pin": {**pin, "sha": "b" * 40}},
        "h3": {"lock_pin": pin},
    }
    done = {
        "h1": {command.APPLIED: {"ok": True, "models_lock": str(path)}},
        "h2": {command.APPLIED: {"ok": True, "models_lock": str(path)}},
        # Its gate failed: nothing is recorded for it.
        "h3": {command.APPLIED: {"ok": False, "models_lock": str(path)}},
        # Pinning off for this host (sglang_server_models_lock: "").
        "h4": {command.APPLIED: {"ok": True, "models_lock": ""}},
    }
    proposals["h4"] = {"lock_pin": pin}
    lines = command.record_pins(lock, proposals, done)
    assert lock.read_lock(path)["owner/m"]["main"]["sha"] == "a" * 40
    assert lines[0].startswith("h1: models lock: owner/m main -> " + "a" * 40 + " (recorded")
    assert lines[1].startswith("h2: the models lock pins owner/m main to " + "a" * 40)
    assert len(lines) == 2
    # A failed cutover writes nothing.
    other = tmp_path / "other.lock.yml"
    failed = {"h3": {command.APPLIED: {"ok": False, "models_lock": str(other)}}}
    assert command.record_pins(lock, {"h3": {"lock_pin": pin}}, failed) == []
    assert not other.exists()
