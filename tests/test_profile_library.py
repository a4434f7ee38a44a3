"""Every profile in profiles/ resolves, validates and renders against the argument catalogues
of both pinned SGLang versions (data/sglang/catalogue-*.json, built from the real wheels), on
the recorded GPU host it targets, with no error and no warning; and says where it comes from.

The hosts are the recorded fixtures (tests/fixtures/gpu-hosts/, through the product's own
nvidia-smi parsers); 8x H200 is the real H200 capture's GPU repeated eight times.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile_fit as fit
from test_profile_fit import host_gpu

ROOT = Path(__file__).resolve().parents[1]

PROFILES = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(ROOT.glob("profiles/*.yml"))}
TEXT = {p.stem: p.read_text() for p in sorted(ROOT.glob("profiles/*.yml"))}
CATALOGUES = {
    p.stem.removeprefix("catalogue-"): json.loads(p.read_text())
    for p in sorted((ROOT / "data" / "sglang").glob("catalogue-*.json"))
}
LOOPBACK = {"host": "127.0.0.1", "port": 30000, "api_key_set": False, "api_key_valid": True}


def group_of(nodes):
    """What a profile sized for `nodes` hosts runs with: {} and loopback NCCL alone; else rank 1
    of a group of that many hosts on 10.0.0.0/24 (gpuhost_serving_group.of_host's shape), its
    peers in the port rule's networks and NCCL on the interface the hosts share."""
    if nodes == 1:
        return {}, LOOPBACK, {}
    members = [f"gpu-{i}" for i in range(nodes)]
    addr = "10.0.0.10:20000"
    group = {
        "name": "g",
        "rank": 1,
        "nnodes": nodes,
        "members": members,
        "rank0": members[0],
        "address": "10.0.0.10",
        "port": 20000,
        "dist_init_addr": addr,
        "addresses": {m: f"10.0.0.{10 + i}" for i, m in enumerate(members)},
        "flags": {"--nnodes": nodes, "--node-rank": 1, "--dist-init-addr": addr},
    }
    listen = {**LOOPBACK, "firewall_cidrs": ["10.0.0.0/24"]}
    return group, listen, {"NCCL_SOCKET_IFNAME": "=eth0"}


def h200x8():
    gpu = copy.deepcopy(host_gpu("h200x1-real"))
    gpu["gpus"] = [dict(gpu["gpus"][0], index=i) for i in range(8)]
    gpu["count"] = 8
    return gpu


TARGET = {
    "glm5-nvfp4-8x-rtx-pro-6000": "rtx-pro-6000x8-proxmox-p2p-ns",
    "glm5-nvfp4-mtp-8x-rtx-pro-6000-fast": "rtx-pro-6000x8-proxmox-p2p-ns",
    "deepseek-v3-fp8-8x-h200": h200x8,
    "deepseek-v3-fp8-2x8x-h100": "h100x8-sxm-nvswitch",
    "glm46-fp8-8x-h100": "h100x8-sxm-nvswitch",
    "qwen3-30b-a3b-2x-80gb": "h200x2-real-preflight",
    "qwen3-30b-a3b-4x-48gb": "l40sx4-pcie-two-numa",
    "qwen3-32b-fp8-1x-80gb": "h200x1-real",
    "qwen3-8b-1x-48gb": "l40sx4-pcie-two-numa",
}


# Shipped with a branch: no commit sha of the repository could be verified from public
# sources (the profile says so). The validator refuses them with --trust-remote-code until the
# inventory's models lock (or sglang_server_revision) names a sha. TODO: pin a sha here.
UNPINNED = {"glm5-nvfp4-8x-rtx-pro-6000", "glm5-nvfp4-mtp-8x-rtx-pro-6000-fast"}
# What the models lock hands validate() for a branch (plugins/action/sglang_profile.py _pin):
# the commit the branch resolved to. Any sha does here; the hub is not asked.
LOCK_PIN = "0123456789abcdef0123456789abcdef01234567"


def test_every_profile_has_a_target_host():
    assert set(TARGET) == set(PROFILES)


@pytest.mark.parametrize("version", sorted(CATALOGUES))
@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_validates_and_renders_on_its_host(name, version):
    target = TARGET[name]
    gpu = target() if callable(target) else host_gpu(target)
    doc = PROFILES[name]
    eff = profile.resolve(doc, {})
    if name in UNPINNED:
        eff["revision"] = LOCK_PIN
    nodes = doc.get("nodes", 1)
    group, listen, overrides = group_of(nodes)
    result = profile.validate(
        eff, CATALOGUES[version], gpu=gpu, listen=listen, nccl_overrides=overrides, group=group
    )
    assert result["errors"] == [], result["errors"]
    # No inert, deprecated or risky flag: a profile shipped here is clean on both lanes. The
    # one allowed warning: a single-GPU profile on a host with more GPUs leaves some idle.
    warnings = [w for w in result["warnings"] if "the rest idle" not in w]
    assert warnings == []
    assert fit.fit(eff, fit.measured(gpu), nodes=nodes)["ok"]
    args = profile.render_args(eff, result["flags"], listen)
    argv = shlex.split(
        profile.exec_start(["/venv/bin/python", "-m", "sglang.launch_server", *args])
    )
    assert argv[argv.index("--model-path") + 1] == doc["model"]
    assert argv[argv.index("--tp-size") + 1] == str(doc["tp_size"])
    for flag, value in doc["flags"].items():
        assert flag in argv, flag
        if value is not True:
            assert argv[argv.index(flag) + 1] == str(value), flag
    # A profile for several hosts: the group's flags, from the group alone.
    for flag, value in (group.get("flags") or {}).items():
        assert flag not in doc["flags"], flag
        assert argv[argv.index(flag) + 1] == str(value), flag
    if profile.DSA_MODEL_PATTERN.search(doc["model"]):
        assert doc["flags"].get("--kv-cache-dtype") == "bf16", "DSA on SM120 needs bf16 KV"


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_says_where_it_comes_from(name):
    doc, text = PROFILES[name], TEXT[name]
    assert doc["description"] and doc["model"] and doc["revision"]
    assert "../shared" not in text and "REFERENCE" not in text
    # A revision is a verified sha, or the file says none could be verified (the lock pins it).
    if not re.fullmatch(r"[0-9a-f]{40}", doc["revision"]):
        assert "No commit sha of this repository could be verified" in text
        assert name in UNPINNED
    # --trust-remote-code only with a reason, said in the file.
    if doc["flags"].get("--trust-remote-code"):
        assert len(str(doc.get("trust_remote_code") or "")) >= 40, (
            "say why --trust-remote-code is needed (trust_remote_code: <reason>)"
        )
        assert "Why --trust-remote-code" in text or "trust_remote_code: >-" in text
    else:
        assert "trust_remote_code" not in doc
    # A baseline names its source, or its absence is said.
    if doc.get("expected_baseline"):
        assert doc["expected_baseline"].get("source")
        for point in doc["expected_baseline"]["points"]:
            assert point["output_tok_s"] > 0 and point["concurrency"] >= 1
    else:
        assert "no\n# expected_baseline" in text or "no expected_baseline" in text


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            n,
            marks=pytest.mark.xfail(
                strict=True, reason="TODO: no verified commit sha of the repository yet"
            )
            if n in UNPINNED
            else [],
        )
        for n in sorted(PROFILES)
    ],
)
def test_profile_revision_is_a_commit_sha(name):
    # Every shipped profile names the commit it serves: the weights, and with
    # --trust-remote-code the Python code the server runs, cannot change under a branch.
    assert re.fullmatch(r"[0-9a-f]{40}", str(PROFILES[name]["revision"]))


@pytest.mark.parametrize("name", sorted(n for n in PROFILES if n in UNPINNED))
def test_an_unpinned_remote_code_profile_is_refused_until_a_sha_is_named(name):
    # The shipped branch with --trust-remote-code: refused, naming the field and the way out.
    doc = PROFILES[name]
    assert doc["flags"].get("--trust-remote-code")
    gpu = host_gpu(TARGET[name])
    cat = CATALOGUES[sorted(CATALOGUES)[0]]
    result = profile.validate(profile.resolve(doc, {}), cat, gpu=gpu, listen=LOOPBACK)
    assert len(result["errors"]) == 1, result["errors"]
    message = result["errors"][0]
    assert message.startswith("revision: got 'main' ")
    assert f"for {doc['model']} with --trust-remote-code" in message
    assert "allowed: a 40-hex commit sha" in message
    assert "sglang_server_revision" in message and "sglang_server_models_lock" in message
    # A sha from the override (sglang_server_revision) is served.
    pinned = profile.resolve(doc, {"revision": LOCK_PIN})
    assert profile.validate(pinned, cat, gpu=gpu, listen=LOOPBACK)["errors"] == []


def test_the_fast_glm5_variant_is_the_public_recipe():
    fast = PROFILES["glm5-nvfp4-mtp-8x-rtx-pro-6000-fast"]
    assert fast["model"] == "festr2/GLM-5-NVFP4-MTP"  # the checkpoint with the MTP layer
    assert fast["flags"]["--speculative-algorithm"] == "NEXTN"
    assert fast["env"]["SGLANG_ENABLE_SPEC_V2"] == "True"  # else NEXTN loads the model twice
    assert fast["flags"]["--moe-runner-backend"] == "cutlass"
    assert "rtx6kpro" in fast["expected_baseline"]["source"]
    assert {p["output_tok_s"] for p in fast["expected_baseline"]["points"]} >= {93.6}
    # Every flag's choice is in both catalogues.
    for version, cat in CATALOGUES.items():
        for flag, value in fast["flags"].items():
            entry = cat["flags"][flag]
            if entry.get("choices"):
                assert value in entry["choices"], (version, flag)


def test_the_public_recipes_b12x_backend_is_refused_by_the_pinned_catalogues():
    # Why the fast profile uses cutlass: b12x is a patch in the public page's own image.
    fast = PROFILES["glm5-nvfp4-mtp-8x-rtx-pro-6000-fast"]
    for cat in CATALOGUES.values():
        eff = profile.resolve(fast, {"flags": {"--moe-runner-backend": "b12x"}})
        result = profile.validate(eff, cat, gpu=host_gpu("rtx-pro-6000x8-proxmox-p2p-ns"))
        assert any("'b12x' is not a choice" in e for e in result["errors"])
