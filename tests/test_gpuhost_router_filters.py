"""The worker-URL and /workers filters the router role and the rolling update share
(plugins/filter/gpuhost_router.py): both must name a worker the same way."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.filter import gpuhost_router as router

# GET /workers of sglang-router 0.3.2, trimmed (captured from the real router here).
WORKERS = {
    "workers": [
        {
            "id": "c7b8008b-804b-445d-8ceb-b6e52a83472e",
            "url": "http://127.0.0.1:31001",
            "is_healthy": True,
        },
        {
            "id": "efae5b6d-b3e2-4763-ba86-0b724a0bc3a8",
            "url": "http://127.0.0.1:31002/",
            "is_healthy": False,
        },
    ],
    "total": 2,
}


def test_explicit_worker_url_wins():
    host = {"sglang_router_worker_url": "http://10.0.0.5:8000/", "ansible_host": "x"}
    assert router.worker_url("gpu1", host) == "http://10.0.0.5:8000"


def test_worker_url_from_address_and_server_port():
    assert router.worker_url("gpu1", {"ansible_host": "10.0.0.5", "sglang_server_port": 8000}) == (
        "http://10.0.0.5:8000"
    )


def test_worker_url_defaults_to_inventory_name():
    assert router.worker_url("gpu1.lan", {"sglang_server_port": 30000}) == "http://gpu1.lan:30000"


def test_worker_url_without_a_port_names_the_setting():
    """sglang_server_port has one default, in group_vars/all: no second copy here."""
    with pytest.raises(AnsibleFilterError, match="sglang_server_port"):
        router.worker_url("gpu1.lan", {})


def test_ipv6_address_gets_brackets():
    host = {"ansible_host": "fd00::5", "sglang_server_port": 30000}
    assert router.worker_url("g", host) == "http://[fd00::5]:30000"


def test_worker_urls_keep_inventory_order():
    hostvars = {
        "b": {"ansible_host": "10.0.0.2", "sglang_server_port": 30000},
        "a": {"ansible_host": "10.0.0.1", "sglang_server_port": 30000},
    }
    assert router.worker_urls(["b", "a"], hostvars) == [
        "http://10.0.0.2:30000",
        "http://10.0.0.1:30000",
    ]


def test_worker_ids_match_urls_with_or_without_trailing_slash():
    assert router.router_worker_ids(WORKERS, "http://127.0.0.1:31002") == [
        "efae5b6d-b3e2-4763-ba86-0b724a0bc3a8"
    ]
    assert router.router_worker_ids(WORKERS, "http://127.0.0.1:31001/") == [
        "c7b8008b-804b-445d-8ceb-b6e52a83472e"
    ]


def test_healthy_only_skips_a_worker_the_router_has_not_found_healthy():
    assert router.router_worker_ids(WORKERS, "http://127.0.0.1:31002", True) == []
    assert router.router_worker_ids(WORKERS, "http://127.0.0.1:31001", True) != []


def test_unknown_worker_has_no_ids():
    assert router.router_worker_ids(WORKERS, "http://127.0.0.1:9") == []


def test_not_a_workers_answer_is_an_error():
    with pytest.raises(AnsibleFilterError, match="not a /workers answer"):
        router.router_worker_ids("Missing or invalid Authorization header", "http://x:1")


def test_found_pairs_name_the_router_host():
    result = {"item": "router1", "json": WORKERS}
    assert router.router_found_pairs(result, "http://127.0.0.1:31001") == [
        ["router1", "c7b8008b-804b-445d-8ceb-b6e52a83472e"]
    ]


# --- serving groups (issue 30): only rank 0 of a group is a worker ---------------------------


def fleet(**extra):
    """Hostvars of a fleet: solo (alone), then group g of a, b, c in inventory order."""
    hostvars = {"solo": {"ansible_host": "10.0.0.9", "sglang_server_port": 30000}}
    for index, name in enumerate(("a", "b", "c")):
        hostvars[name] = {
            "ansible_host": f"10.0.0.{index + 1}",
            "sglang_server_port": 30000,
            "sglang_server_group": "g",
            "sglang_server_node_rank": -1,
            "sglang_server_group_address": f"10.0.0.{index + 1}",
            "sglang_server_dist_init_port": 20000,
        }
    for name, values in extra.items():
        hostvars[name].update(values)
    return hostvars


def test_worker_urls_leave_out_the_ranks_above_zero_of_a_group():
    assert router.worker_urls(["solo", "a", "b", "c"], fleet()) == [
        "http://10.0.0.9:30000",
        "http://10.0.0.1:30000",
    ]


def test_a_pinned_rank_0_is_the_worker_wherever_it_stands_in_the_inventory():
    hostvars = fleet(c={"sglang_server_node_rank": 0})
    assert router.worker_urls(["solo", "a", "b", "c"], hostvars) == [
        "http://10.0.0.9:30000",
        "http://10.0.0.3:30000",
    ]
    assert [router.is_worker(n, hostvars) for n in ("a", "b", "c")] == [False, False, True]


def test_a_bad_group_setting_is_a_filter_error_naming_the_variable():
    with pytest.raises(AnsibleFilterError, match="sglang_server_node_rank: got 7 on b"):
        router.worker_urls(["a", "b"], fleet(b={"sglang_server_node_rank": 7}))
