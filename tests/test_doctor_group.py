"""`gpuhost doctor` on the hosts of a serving group (issue 30): plugins/module_utils/
gpuhost_doctor_group.py. A rank >= 1 serves only SGLang's dummy /health, /ping and
/health_generate: the doctor asks those, says whose API the node serves, and never flags the
missing /v1/models. Against the SGLang stand-in's ranks (tests/standin, a test double) too.
"""

from __future__ import annotations

import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_doctor_group as dg
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_sglang_api import Client
from gpuhost_fakes import ROOT, free_port
from test_standin_ranks import get, start, stop, wait_for

GROUP = {
    "name": "big",
    "nnodes": 2,
    "members": ["gpu-a", "gpu-b"],
    "rank0": "gpu-a",
    "dist_init_addr": "10.0.0.1:20000",
}
ALL_OK = dict.fromkeys(dg.RANK_ROUTES, 200)


def never():
    raise AssertionError("the routes must not be asked here")


def test_a_host_on_its_own_gets_no_group_finding():
    assert dg.check_group({}, never) == []


def test_rank_0_serves_the_api_and_is_not_asked_the_dummy_routes():
    (found,) = dg.check_group({**GROUP, "rank": 0}, never)
    assert found["check"] == "doctor.group" and found["status"] == "pass"
    assert found["message"].startswith("rank 0 of group big (2 nodes: gpu-a, gpu-b)")


def test_rank_1_passes_on_the_three_routes_naming_its_rank_0():
    (found,) = dg.check_group({**GROUP, "rank": 1}, lambda: ALL_OK)
    assert found["status"] == "pass"
    assert found["message"].startswith("rank 1 of group big, served by rank 0 gpu-a: ")
    assert "/health, /ping, /health_generate answer 200" in found["message"]


def test_rank_1_fails_naming_each_bad_route_and_where_to_look():
    answers = {**ALL_OK, "/health": 503, "/ping": "GET /ping: URLError: refused"}
    (found,) = dg.check_group({**GROUP, "rank": 1}, lambda: answers, "sglang-server")
    assert found["status"] == "fail"
    assert "rank 1 of group big, served by rank 0 gpu-a: " in found["message"]
    assert "/health answered 503; /ping: GET /ping: URLError: refused" in found["message"]
    assert "/health_generate" not in found["message"].split("(allowed")[0]
    assert "10.0.0.1:20000" in found["fix"] and "on gpu-a" in found["fix"]


def test_a_node_without_a_server_unit_warns_unasked():
    (found,) = dg.check_group({**GROUP, "rank": 1}, never, "sglang-server", installed=False)
    assert found["status"] == "warn" and "not asked" in found["message"]
    assert "rank 1 of group big" in found["message"]
    (found,) = dg.check_group({**GROUP, "rank": 0}, never, "sglang-server", installed=False)
    assert found["status"] == "warn"
    assert found["message"].startswith("rank 0 of group big (2 nodes: gpu-a, gpu-b): no sglang")


def test_the_doctor_role_passes_the_group_and_the_playbook_asks_rank_0_only():
    task = next(
        t
        for t in yaml.safe_load((ROOT / "roles/doctor/tasks/main.yml").read_text())
        if "gpuhost.gpu.doctor" in t
    )
    assert task["gpuhost.gpu.doctor"]["serving_group"] == "{{ _doctor_serving_group }}"
    plays = yaml.safe_load((ROOT / "playbooks/doctor.yml").read_text())
    ask = next(t for p in plays for t in p.get("tasks", []) if t["name"].startswith("Ask the"))
    assert "(sglang_server_serving_group.rank | default(0)) | int == 0" in ask["when"]


def test_the_stand_ins_rank_1_passes_and_its_api_routes_are_never_asked(tmp_path):
    port0, port1 = free_port(range(32200, 32300)), free_port(range(32300, 32400))
    dist = free_port(range(32400, 32500))
    rank0 = start(tmp_path, "rank0", port0, dist, 0)
    rank1 = start(tmp_path, "rank1", port1, dist, 1)
    try:
        assert wait_for(lambda: get(port1, "/health")[0] == 200), (
            tmp_path / "rank1.log"
        ).read_text()
        answers = dg.read_routes(Client(f"http://127.0.0.1:{port1}", timeout=5))
        assert answers == ALL_OK
        assert get(port1, "/v1/models")[0] == 404  # what the doctor must not ask
        (found,) = dg.check_group({**GROUP, "rank": 1}, lambda: answers)
        assert found["status"] == "pass"
        # Rank 0 gone: the group is broken, rank 1 exits and its routes no longer answer.
        rank0.kill()
        assert rank1.wait(timeout=20) == 1
        down = dg.read_routes(Client(f"http://127.0.0.1:{port1}", timeout=5))
        (found,) = dg.check_group({**GROUP, "rank": 1}, lambda: down)
        assert found["status"] == "fail" and "/health: GET /health: " in found["message"]
    finally:
        stop(rank0, rank1)
