"""A serving group's pure decisions (plugins/plugin_utils/gpuhost_serving_group.py, issue 30):
node ranks, the --dist-init-addr value, the nodes' consistency and group-aware batches."""

from __future__ import annotations

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_serving_group as group


def members(*pins):
    return [{"name": f"gpu-{i}", "rank": pin} for i, pin in enumerate(pins)]


def test_ranks_follow_the_inventory_order():
    assert group.ranks("g", members(-1, -1, None)) == {"gpu-0": 0, "gpu-1": 1, "gpu-2": 2}


def test_pinned_ranks_first_the_others_fill_the_free_ones_in_order():
    assert group.ranks("g", members(-1, 0, -1, 1)) == {
        "gpu-0": 2,
        "gpu-1": 0,
        "gpu-2": 3,
        "gpu-3": 1,
    }


@pytest.mark.parametrize(
    ("pins", "words"),
    [
        ((-1,), "has 1 host(s); allowed: a group of 2 or more"),
        ((0, 2), "got 2 on gpu-1; allowed: -1 (by inventory order) or 0..1"),
        ((0, True), "got True on gpu-1"),
        ((1, 1, -1), "1 on both gpu-0 and gpu-1"),
        ((0, "1"), "got '1' on gpu-1"),
    ],
)
def test_bad_ranks_name_the_variable_and_the_value(pins, words):
    with pytest.raises(group.GroupError) as err:
        group.ranks("g", members(*pins))
    assert words in str(err.value)
    assert str(err.value).startswith(("sglang_server_node_rank: ", "sglang_server_group: "))


@pytest.mark.parametrize(
    ("address", "port", "expected"),
    [
        ("10.0.0.11", 20000, "10.0.0.11:20000"),
        ("gpu-a.lan", 20000, "gpu-a.lan:20000"),
        ("fd00::11", 20000, "[fd00::11]:20000"),
        (" 10.0.0.11 ", 1, "10.0.0.11:1"),
    ],
)
def test_dist_init_addr(address, port, expected):
    assert group.dist_init_addr("g", "gpu-0", address, port) == expected


@pytest.mark.parametrize(
    ("address", "port", "words"),
    [
        ("", 20000, "sglang_server_group_address: empty for gpu-0"),
        ("127.0.0.1", 20000, "not loopback"),
        ("127.0.1.1", 20000, "not loopback"),
        ("::1", 20000, "not loopback"),
        ("localhost", 20000, "not loopback"),
        ("10.0.0.1;reboot", 20000, "got '10.0.0.1;reboot'"),
        ("a b", 20000, "an IPv4 or IPv6 address or a host name"),
        ("10.0.0.11", 0, "sglang_server_dist_init_port: got 0"),
        ("10.0.0.11", 65536, "allowed: 1..65535"),
        ("10.0.0.11", "20000", "got '20000'"),
    ],
)
def test_bad_dist_init_addr(address, port, words):
    with pytest.raises(group.GroupError) as err:
        group.dist_init_addr("g", "gpu-0", address, port)
    assert words in str(err.value)


def node(**changes):
    facts = {
        "gpu_count": 8,
        "gpu_name": "NVIDIA H200",
        "driver": "580.95.05",
        "nccl": "2.27.3",
        "venv_lock": "sha256:ab12",
        "model": "profile 'deepseek-v3-fp8-2x8x-h100', model ''",
        "model_revision": "87663416be779d980e4aa102edc328b85d7802f6",
        "flags": "{}",
    }
    return {**facts, **changes}


def by_check(findings):
    return {f["check"]: f for f in findings}


def test_consistent_nodes_pass_every_check():
    found = by_check(group.consistency("g", {"a": node(), "b": node()}))
    assert sorted(found) == sorted(f"preflight.group.g.{key}" for key, _ in group.SHARED)
    assert {f["status"] for f in found.values()} == {"pass"}


def test_a_node_that_differs_fails_naming_each_value_and_its_hosts():
    found = by_check(
        group.consistency("g", {"a": node(), "b": node(), "c": node(driver="570.172.08")})
    )
    driver = found["preflight.group.g.driver"]
    assert driver["status"] == "fail"
    assert "570.172.08 on c" in driver["message"] and "580.95.05 on a, b" in driver["message"]
    assert found["preflight.group.g.gpu_count"]["status"] == "pass"


def test_a_value_not_read_is_a_warning_not_a_pass():
    found = by_check(group.consistency("g", {"a": node(), "b": node(nccl="unknown")}))
    assert found["preflight.group.g.nccl"]["status"] == "warn"
    assert "not read on b" in found["preflight.group.g.nccl"]["message"]


def test_batches_keep_a_group_together_and_count_it_once():
    hosts = ["w1", "g-a", "w2", "g-b", "w3"]
    group_of = {"g-a": "glm", "g-b": "glm"}
    assert group.batches(hosts, group_of, 1) == (["w1", "g-a", "g-b", "w2", "w3"], [1, 2, 1, 1])
    assert group.batches(hosts, group_of, 2) == (["w1", "g-a", "g-b", "w2", "w3"], [3, 2])
    # 50% of 4 units (w1, glm, w2, w3) is 2 units a batch.
    assert group.batches(hosts, group_of, "50%")[1] == [3, 2]
    # No group: Ansible's own serial.
    assert group.batches(["a", "b", "c"], {}, 2) == (["a", "b", "c"], [2, 1])


@pytest.mark.parametrize("serial", [0, "0", "-1", "x", "0%", "101%", "%"])
def test_bad_serial(serial):
    with pytest.raises(group.SerialError) as err:
        group.batches(["a"], {}, serial)
    assert str(err.value).startswith(f"serial: got {serial!r}; allowed:")


def hostvars(**hosts):
    """Inventory order is the keyword order, as Ansible's hostvars iterate."""
    base = {"sglang_server_dist_init_port": 20000, "sglang_server_node_rank": -1}
    return {name: {**base, **values} for name, values in hosts.items()}


def test_a_host_without_a_group_has_none():
    hv = hostvars(a={"sglang_server_group": ""}, b={})
    assert group.of_host("a", hv) == {} and group.of_host("b", hv) == {}


def test_of_host_ranks_the_members_and_gives_each_its_flags():
    hv = hostvars(
        solo={"sglang_server_group": ""},
        b={"sglang_server_group": "g1", "sglang_server_group_address": "10.0.0.2"},
        a={
            "sglang_server_group": "g1",
            "sglang_server_group_address": "10.0.0.1",
            "sglang_server_node_rank": 0,
        },
        other={"sglang_server_group": "g2", "sglang_server_group_address": "10.0.1.1"},
    )
    got = group.of_host("b", hv)
    assert got["members"] == ["a", "b"] and got["rank0"] == "a" and got["rank"] == 1
    assert got["flags"] == {"--nnodes": 2, "--node-rank": 1, "--dist-init-addr": "10.0.0.1:20000"}
    assert group.of_host("a", hv)["flags"]["--node-rank"] == 0
    with pytest.raises(group.GroupError, match="'g2' has 1 host"):
        group.of_host("other", hv)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {"b": {"sglang_server_dist_init_port": 20001}},
            "sglang_server_dist_init_port: 20001 on b",
        ),
        (
            {"a": {"sglang_server_group": "g 1"}, "b": {"sglang_server_group": "g 1"}},
            "sglang_server_group: got 'g 1' on a",
        ),
        ({"a": {"sglang_server_group_address": "127.0.0.1"}}, "not loopback"),
    ],
)
def test_of_host_refuses_what_cannot_form_a_group(changes, words):
    hv = hostvars(
        a={"sglang_server_group": "g1", "sglang_server_group_address": "10.0.0.1"},
        b={"sglang_server_group": "g1", "sglang_server_group_address": "10.0.0.2"},
    )
    for host, values in changes.items():
        hv[host].update(values)
    with pytest.raises(group.GroupError) as err:
        group.of_host("a", hv)
    assert words in str(err.value)


def node_vars(**changes):
    values = {
        "gpuhost_gpu": {
            "count": 8,
            "gpus": [{"name": "NVIDIA H100 80GB HBM3"}],
            "driver": {"version": "580.95.05"},
        },
        "python_env_lane": "cu128",
        "python_env_lock_file": "",
        "nccl_version": "",
        "sglang_server_profile": "deepseek-v3-fp8-2x8x-h100",
        "sglang_server_model_id": "",
        "sglang_server_revision": "",
        "sglang_server_flags": {"--mem-fraction-static": 0.85},
    }
    return {**values, **changes}


GROUP = {"name": "g", "members": ["a", "b"], "nnodes": 2, "rank0": "a"}


def test_preflight_passes_a_group_whose_nodes_agree_and_are_all_in_the_run():
    found = by_check(group.preflight(GROUP, {"a": node_vars(), "b": node_vars()}, ["a", "b", "x"]))
    assert {f["status"] for f in found.values()} == {"pass"}, found
    assert "lane cu128" in found["preflight.group.g.venv_lock"]["message"]


def test_preflight_fails_a_node_left_out_of_the_run_and_names_the_limit():
    found = by_check(group.preflight(GROUP, {"a": node_vars(), "b": node_vars()}, ["a"]))
    assert found["preflight.group.g.members"]["status"] == "fail"
    assert "b not in this run" in found["preflight.group.g.members"]["message"]
    assert "--limit a,b" in found["preflight.group.g.members"]["fix"]


@pytest.mark.parametrize(
    ("changes", "check"),
    [
        ({"sglang_server_flags": {"--mem-fraction-static": 0.8}}, "flags"),
        ({"python_env_lock_file": "/x/other.txt"}, "venv_lock"),
        ({"sglang_server_profile": "other"}, "model"),
        ({"sglang_server_revision": "abc"}, "model_revision"),
        ({"sglang_server_tp_size": 8}, "model"),
        (
            {
                "gpuhost_gpu": {
                    "count": 4,
                    "gpus": [{"name": "NVIDIA H100 80GB HBM3"}],
                    "driver": {"version": "580.95.05"},
                }
            },
            "gpu_count",
        ),
    ],
)
def test_preflight_fails_nodes_that_would_serve_differently(changes, check):
    found = by_check(
        group.preflight(GROUP, {"a": node_vars(), "b": node_vars(**changes)}, ["a", "b"])
    )
    item = found[f"preflight.group.g.{check}"]
    assert item["status"] == "fail", item


def test_the_group_gate_message_names_each_failed_node_its_rank_and_cause():
    from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_serving_group import (
        group_gate_message,
    )

    g = {"name": "pair", "members": ["w2", "w3"]}
    hv = {
        "w2": {"_sglang_server_gate": {"cause": "not healthy within 20 s: port 1 closed"}},
        "w3": {"_sglang_server_gate": {"msg": "rank 1 has not joined"}},
    }
    assert group_gate_message(["w3"], g, hv) == (
        "w3 (rank 1 of serving group pair) failed its gate: rank 1 has not joined"
    )
    assert group_gate_message(["w2", "w3"], g, hv).startswith(
        "w2 (rank 0 of serving group pair) failed its gate: not healthy within 20 s"
    )
