"""A serving group on the profile side (issue 30; plugins/plugin_utils/gpuhost_profile_group.py):
the group's --nnodes, --node-rank and --dist-init-addr come from the group alone and reach the
rules and the argv; a profile is sized for `nodes` hosts and serves only a group of that size;
the fit counts the group's GPUs; the group's other nodes must be inside the port rule's networks.

The catalogues are the pinned ones (data/sglang/); the hosts the recorded fixtures; the group is
what gpuhost_serving_group.of_host derives from an inventory (tests/test_serving_group.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_adopt as adopt
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile_fit as fit
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import (
    gpuhost_profile_group as group_rules,
)
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_serving_group as serving
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_validate as validate
from gpuhost_fakes import run_playbook
from test_profile_fit import LIBRARY, host_gpu

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = json.loads((ROOT / "data/sglang/catalogue-0.5.10.post1.json").read_text())
PROFILES = dict(LIBRARY)
TWO_NODE = "deepseek-v3-fp8-2x8x-h100"
H100X8 = host_gpu("h100x8-sxm-nvswitch")
ETH = {"NCCL_SOCKET_IFNAME": "=eth0"}


def group(rank=1, addresses=("10.0.0.2", "10.0.0.3"), port=20000):
    """sglang_server_serving_group of one host, derived as the inventory's variables would be."""
    names = [f"gpu-{chr(97 + i)}" for i in range(len(addresses))]
    hostvars = {
        n: {
            "sglang_server_group": "ds",
            "sglang_server_node_rank": -1,
            "sglang_server_group_address": a,
            "sglang_server_dist_init_port": port,
        }
        for n, a in zip(names, addresses, strict=True)
    }
    return serving.of_host(names[rank], hostvars)


def listen(cidrs=("10.0.0.0/24",)):
    return {"host": "127.0.0.1", "port": 30000, "api_key_set": False, "firewall_cidrs": cidrs}


def check(doc=None, over=None, grp=None, cidrs=("10.0.0.0/24",), nccl=ETH, gpu=H100X8):
    eff = profile.resolve(PROFILES[TWO_NODE] if doc is None else doc, over or {})
    grp = group() if grp is None else grp
    return eff, profile.validate(
        eff, CATALOGUE, gpu=gpu, listen=listen(cidrs), nccl_overrides=nccl, group=grp
    )


# --- the group's flags: from the group, never from the flags -----------------------------


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--nnodes", 2),
        ("--node-rank", 1),
        ("--dist-init-addr", "10.0.0.9:1"),
        ("--nccl-init-addr", "x:1"),
    ],
)
def test_a_group_flag_from_the_flags_is_refused_naming_the_group(flag, value):
    # From sglang_server_flags (the inventory) and from a profile file alike.
    _, inventory = check(over={"flags": {flag: value}})
    doc = {**PROFILES[TWO_NODE], "flags": {**PROFILES[TWO_NODE]["flags"], flag: value}}
    _, from_profile = check(doc=doc)
    for result in (inventory, from_profile):
        assert any(
            e.startswith(f"sglang_server_flags: {flag} is set through sglang_server_group")
            for e in result["errors"]
        ), result["errors"]
    # And before any change, by the role's constraints (validate's reserved_flags).
    rule = yaml.safe_load((ROOT / "roles/sglang_server/meta/constraints.yml").read_text())
    with pytest.raises(validate.Invalid, match=f"no {flag} .it is set through sglang_server_group"):
        validate._check_constraint({flag: value}, rule["variables"]["sglang_server_flags"])


def test_the_groups_flags_reach_the_rules_and_the_argv():
    eff, result = check()
    assert result["errors"] == [], result["errors"]
    # The TP rule reads --nnodes: TP 16 over 2 hosts is 8 per host, all of this one's.
    (tp,) = [f for f in result["findings"] if f["check"] == "sglang_server.tp_size"]
    assert tp["status"] == "pass", tp
    args = profile.render_args(eff, result["flags"], listen())
    tail = args[args.index("--nnodes") :]
    assert tail[:6] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.2:20000"]
    # Rank 0 of the same group: the same line but its rank.
    _, zero = check(grp=group(rank=0))
    assert zero["flags"]["--node-rank"] == 0
    assert zero["flags"]["--dist-init-addr"] == "10.0.0.2:20000"


def test_alone_there_are_no_group_flags():
    doc = PROFILES["glm46-fp8-8x-h100"]
    eff = profile.resolve(doc, {"revision": "0" * 40})
    result = profile.validate(eff, CATALOGUE, gpu=H100X8, listen=listen(()), group={})
    assert result["errors"] == [], result["errors"]
    assert not set(result["flags"]) & set(group_rules.GROUP_FLAGS)
    assert not [f for f in result["findings"] if f["check"] == "sglang_server.group_peers"]


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        ({"--nnodes": 1, "--node-rank": 0, "--dist-init-addr": "a:1"}, "--nnodes 1; allowed"),
        ({"--nnodes": 2, "--node-rank": 2, "--dist-init-addr": "a:1"}, "--node-rank 2; allowed"),
        (
            {"--nnodes": 2, "--node-rank": 1, "--dist-init-addr": "a:1 --host 0.0.0.0"},
            "--dist-init-addr 'a:1 --host 0.0.0.0'; allowed: HOST:PORT",
        ),
    ],
)
def test_a_malformed_group_is_refused_before_it_reaches_the_argv(flags, shown):
    bad = {**group(), "flags": flags}
    _, result = check(grp=bad)
    assert any(
        e.startswith("sglang_server_serving_group (group ds): ") and shown in e
        for e in result["errors"]
    ), result["errors"]
    assert not set(result["flags"]) & set(group_rules.GROUP_FLAGS)


# --- profiles sized for several hosts ---------------------------------------------------


def test_a_two_host_profile_alone_is_refused_naming_the_way_out():
    message = group_rules.nodes_problem(TWO_NODE, PROFILES[TWO_NODE], {}, LIBRARY)
    assert message.startswith(
        f"sglang_server_profile: got '{TWO_NODE}', a profile sized for 2 host(s)"
    )
    assert 'this host serves alone (sglang_server_group is "")' in message
    assert "put 2 hosts with the same GPUs in one sglang_server_group" in message
    assert "glm46-fp8-8x-h100" in message  # the profiles for one host
    assert group_rules.nodes_problem(TWO_NODE, PROFILES[TWO_NODE], group(), LIBRARY) is None


def test_a_one_host_profile_in_a_group_is_refused():
    name = "glm46-fp8-8x-h100"
    message = group_rules.nodes_problem(name, PROFILES[name], group(), LIBRARY)
    assert "a profile sized for 1 host(s)" in message
    assert "sglang_server_group 'ds' has 2 hosts (gpu-a, gpu-b)" in message
    assert f"a profile with nodes: 2 ({TWO_NODE})" in message
    assert (
        "sglang_server_profile '' with sglang_server_model_id and sglang_server_tp_size" in message
    )
    assert group_rules.nodes_problem(name, PROFILES[name], {}, LIBRARY) is None
    # A group of 3: no profile of the library is sized for it, and the message says so.
    three = group(addresses=("10.0.0.2", "10.0.0.3", "10.0.0.4"))
    assert "none in the library is sized for 3 host(s)" in group_rules.nodes_problem(
        TWO_NODE, PROFILES[TWO_NODE], three, LIBRARY
    )


@pytest.mark.parametrize("nodes", [0, -1, "two", True, 1.5])
def test_a_profiles_nodes_is_checked(nodes):
    (problem,) = fit.doc_problems("x", {"nodes": nodes})
    assert f"nodes: got {nodes!r}; allowed: an integer >= 1" in problem


def test_auto_picks_a_group_profile_only_for_a_group_of_its_size():
    alone = fit.select(LIBRARY, H100X8)
    assert alone["selected"] == "glm46-fp8-8x-h100"
    (skipped,) = [c for c in alone["considered"] if c["name"] == TWO_NODE]
    assert skipped["reasons"] == ["sized for 2 host(s) (nodes: 2), this host serves alone"]
    two = fit.select(LIBRARY, H100X8, nodes=2)
    assert two["selected"] == TWO_NODE, two["message"]
    assert "for a serving group of 2 hosts, each with 8x NVIDIA H100" in two["message"]
    # A one-host profile is never picked for a group member, even one that fits the host.
    (glm,) = [c for c in two["considered"] if c["name"] == "glm46-fp8-8x-h100"]
    assert glm["reasons"] == ["sized for 1 host(s) (nodes: 1), the serving group has 2 hosts"]
    three = fit.select(LIBRARY, H100X8, nodes=3)
    assert three["selected"] is None
    assert "auto found no profile for a serving group of 3 hosts" in three["message"]


def test_the_fit_counts_the_groups_gpus():
    doc = PROFILES[TWO_NODE]
    ok = fit.fit(doc, fit.measured(H100X8), nodes=2)
    assert ok["ok"], ok["reasons"]
    # requires.gpus is per host; the weights are sharded over all 16 GPUs of the group.
    assert ok["numbers"]["gpus_needed"] == 8 and ok["numbers"]["weights_per_gpu_gib"] == 40.1
    assert "16 GPUs over 2 hosts: the group's pool 1082.6 GiB" in ok["lines"][0]
    # The same weights on one host's 8 GPUs do not fit (what the group is for).
    single = {**doc, "nodes": 1, "tp_size": 8}
    alone = fit.fit(single, fit.measured(H100X8))
    assert (
        "weights do not fit: weights 641.0 GiB (the profile's weights_gib) / 8 GPU(s)"
        in (alone["reasons"][0])
    )
    # Per host: TP 16 over 2 hosts of 4 GPUs each is short by 4 on each.
    small = {**H100X8, "count": 4, "gpus": H100X8["gpus"][:4]}
    short = fit.fit({**doc, "requires": {}}, fit.measured(small), nodes=2)
    assert short["reasons"][0] == (
        "needs 8 GPU(s) per host (TP 16 x PP 1 over 2 hosts), this host has 4"
    )


# --- the group's other nodes inside the port rule's networks -------------------------------


def test_a_peer_outside_the_firewall_cidrs_is_refused_naming_the_fix():
    # Rank 1 (gpu-b, 10.0.0.3) needs only its peer gpu-a inside, not itself.
    _, result = check(cidrs=("10.0.0.2/32",))
    assert result["errors"] == [], result["errors"]
    _, rank0 = check(grp=group(rank=0), cidrs=("10.0.0.2/32",))
    (error,) = [e for e in rank0["errors"] if e.startswith("sglang_server_firewall_cidrs")]
    assert "gpu-b, a node of group ds at 10.0.0.3 (its sglang_server_group_address)" in error
    assert "--dist-init-addr port 20000" in error and "add 10.0.0.3/32" in error
    (finding,) = [f for f in rank0["findings"] if f["check"] == "sglang_server.group_peers"]
    assert finding["status"] == "fail" and finding["fix"].startswith("add 10.0.0.3/32")
    # With no networks at all (loopback only) every peer is outside.
    _, none = check(cidrs=())
    assert any("gpu-a, a node of group ds at 10.0.0.2" in e for e in none["errors"])


def test_peers_inside_pass_and_ipv6_is_named_as_such():
    _, inside = check(cidrs=("192.168.0.0/16", "10.0.0.2/32"))
    (finding,) = [f for f in inside["findings"] if f["check"] == "sglang_server.group_peers"]
    assert finding["status"] == "pass" and "gpu-a" in finding["message"]
    v6 = group(rank=1, addresses=("fd00::2", "fd00::3"))
    found = group_rules.peers(v6, ["10.0.0.0/8"])
    assert "add fd00::2/128" in found["errors"][0]
    assert group_rules.peers(v6, ["fd00::/64"])["errors"] == []


def test_a_peer_given_by_name_is_a_warning_that_says_it_cannot_be_checked():
    named = group(rank=0, addresses=("10.0.0.2", "gpu-b.lan"))
    found = group_rules.peers(named, ["10.0.0.0/24"])
    assert found["errors"] == []
    (warning,) = found["warnings"]
    assert "sglang_server_group_address of gpu-b (group ds) is the host name 'gpu-b.lan'" in warning
    assert "cannot be checked here" in warning
    assert [f["status"] for f in found["findings"]] == ["warn"]


# --- adopt: a hand-started multi-node server ----------------------------------------------


@pytest.mark.parametrize("flag", group_rules.GROUP_FLAGS)
def test_adopt_says_the_group_sets_the_flag(flag):
    flags = adopt._Flags(profile.as_catalogue(CATALOGUE), {})
    flags.add(flag, "2")
    (got,) = flags.items
    assert got["status"] == "changed" and got["to"] == "sglang_server_group"
    assert got["reason"].startswith("set through sglang_server_group")
    assert flag not in flags.profile_flags


# --- the action: the group as role sglang_server passes it -------------------------------


def test_the_action_takes_the_group(tmp_path):
    two = group(rank=1)
    args = {
        "sglang_version": "0.5.10.post1",
        "entrypoint": ["python", "-m", "sglang.launch_server"],
        "gpu": H100X8,
        "nccl_overrides": ETH,
        "models_lock": "",
        "display": False,
    }
    cases = {
        "auto": {"profile": "auto", "group": two, "firewall_cidrs": ["10.0.0.0/24"]},
        "alone": {"profile": TWO_NODE, "group": {}},
        "outside": {"profile": TWO_NODE, "group": two, "firewall_cidrs": []},
    }
    # Each case in a block whose rescue keeps the refusal: what the action returned either way.
    tasks = [
        {
            "block": [
                {"gpuhost.gpu.sglang_profile": {**args, **extra}, "register": "got"},
                {"ansible.builtin.set_fact": {name: "{{ got }}"}},
            ],
            "rescue": [{"ansible.builtin.set_fact": {name: "{{ ansible_failed_result }}"}}],
        }
        for name, extra in cases.items()
    ]
    keep = "{{ {'auto': auto, 'alone': alone, 'outside': outside} | to_json }}"
    tasks.append({"ansible.builtin.copy": {"content": keep, "dest": str(tmp_path / "out.json")}})
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    python = f"ansible_python_interpreter={sys.executable}"
    proc = run_playbook(
        [tmp_path / "play.yml", "-c", "local", "-i", "localhost,", "-e", python], tmp_path / "f"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    plan = out["auto"]["ansible_facts"]["gpuhost_sglang"]
    assert plan["profile"] == TWO_NODE
    argv = plan["argv"]
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.2:20000"
    assert out["alone"]["failed"] and "a profile sized for 2 host(s)" in out["alone"]["msg"]
    assert "Nothing was changed" in out["alone"]["msg"]
    assert out["outside"]["failed"] and "add 10.0.0.2/32" in out["outside"]["msg"]


def test_role_sglang_server_passes_the_group_and_the_networks():
    tasks = yaml.safe_load((ROOT / "roles/sglang_server/tasks/validate.yml").read_text())
    (action,) = [
        t["gpuhost.gpu.sglang_profile"] for t in tasks if "gpuhost.gpu.sglang_profile" in t
    ]
    assert action["group"] == "{{ sglang_server_serving_group }}"
    assert action["firewall_cidrs"] == "{{ sglang_server_firewall_cidrs }}"
