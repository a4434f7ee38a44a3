"""Issue 28 item 7: a second `provision` on a serving multi-GPU host must not run the 1 GiB
all-reduce sweep beside SGLang. The pure decision (gpuhost_nccl_rerun.plan: run / skip with
the recorded verdict / refuse), the GPU process reader on real nvidia-smi captures, and the
wiring of roles/nccl (the sweep and autotune run only on the plan's "run")."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_nccl_rerun as rr
from gpuhost_fakes import ROOT

DAY2 = ROOT / "tests/fixtures/gpu-hosts/h200x1-day2"
NCCL = ROOT / "roles/nccl/tasks"
DECISION = {
    "topology_class": "nvlink",
    "gpu_count": 2,
    "nccl_version": "2.27.3",
    "env": {"NCCL_P2P_LEVEL": "NVL"},
}
INPUTS = rr.inputs_hash(DECISION, 32768, 1 << 30)
VERDICT = {"status": "pass", "message": "nvlink: peak busbw 361 GB/s", "checks": []}
RECORDED = {"inputs": INPUTS, "verdict": VERDICT}
HOLDER = [{"pid": 726, "name": "python3", "used_mib": 10218}]


def test_processes_from_the_real_captures():
    # nvidia-smi -q -x on the real H200: idle, then a torch process holding 10218 MiB.
    assert rr.gpu_processes((DAY2 / "idle-q.xml").read_text()) == []
    assert rr.gpu_processes((DAY2 / "load-q.xml").read_text()) == HOLDER
    # The role's query (--query-compute-apps=pid,process_name,used_memory, csv, noheader,
    # nounits): the same process as its rows; no row when idle; an error text is "unknown".
    assert rr.gpu_processes("726, python3, 10218\n") == HOLDER
    assert rr.gpu_processes("") == []
    assert rr.gpu_processes("NVIDIA-SMI has failed because it couldn't communicate") is None


def test_inputs_hash_follows_topology_version_env_and_sizes():
    assert rr.inputs_hash(dict(DECISION), 32768, 1 << 30) == INPUTS
    for change in (
        {"topology_class": "pcie_p2p"},
        {"nccl_version": "2.28.1"},
        {"env": {"NCCL_P2P_LEVEL": "SYS"}},
        {"gpu_count": 4},
    ):
        assert rr.inputs_hash({**DECISION, **change}, 32768, 1 << 30) != INPUTS, change
    assert rr.inputs_hash(DECISION, 32768, 1 << 29) != INPUTS


@pytest.mark.parametrize(
    ("recorded", "processes", "active", "drained", "action"),
    [
        (RECORDED, [], False, False, "run"),  # free GPUs: always measured
        ({}, None, False, False, "run"),  # nvidia-smi silent, the unit down: free
        (RECORDED, [], True, False, "skip"),  # the server holds them, same inputs
        (RECORDED, HOLDER, False, False, "skip"),  # a process holds them, same inputs
        # drained from the routers, its server still holds the GPUs: never beside it
        ({"inputs": "0" * 16, "verdict": VERDICT}, [], True, True, "refuse"),
        ({}, HOLDER, True, True, "defer"),  # no record, drained
        ({"inputs": "0" * 16, "verdict": VERDICT}, [], True, False, "refuse"),  # changed, serving
        ({}, HOLDER, True, False, "defer"),  # nothing recorded (an upgraded host), serving
        ({"inputs": INPUTS, "verdict": {}}, [], True, False, "defer"),  # an empty verdict
    ],
)
def test_plan(recorded, processes, active, drained, action):
    plan = rr.plan(INPUTS, recorded, processes, active, drained, "sglang-server")
    assert plan["action"] == action, plan
    assert plan["reason"]
    if action == "skip":
        assert plan["verdict"] == VERDICT
        assert "not re-run" in plan["reason"] and "held" in plan["reason"]
    if action == "refuse":
        assert "Stop sglang-server" in plan["reason"] and plan["verdict"] is None
        assert ("sglang-server is active" in plan["reason"]) is active
        assert ("pid 726 python3 (10218 MiB)" in plan["reason"]) is bool(processes)


def _tasks(name):
    return yaml.safe_load((NCCL / name).read_text())


def _named(tasks, fragment):
    return next(t for t in tasks if fragment in t["name"])


def test_held_is_read_before_autotune_and_verify():
    main = [t["name"] for t in _tasks("main.yml")]
    assert main.index("Measure") < main.index("Configure") < main.index("Verify")
    measure = [t["name"] for t in _tasks("measure.yml")]
    assert measure.index("Install the all-reduce sweep") < measure.index(
        "Look at what holds the GPUs"
    )
    assert measure.index("Look at what holds the GPUs") < measure.index("Autotune")
    assert measure.index("Autotune") < measure.index("Sweep, or report the recorded verdict")
    held = _tasks("held.yml")
    apps = _named(held, "compute processes")["ansible.builtin.command"]["argv"]
    assert apps == [
        "nvidia-smi",
        "--query-compute-apps=pid,process_name,used_memory",
        "--format=csv,noheader,nounits",
    ]
    unit = _named(held, "server holds")["ansible.builtin.systemd_service"]["name"]
    assert unit == "{{ sglang_server_service_name }}.service"
    drained = _named(held, "drained")["ansible.builtin.include_role"]
    assert drained == {"name": "rolling_update", "tasks_from": "drained_mark"}
    # The record counts only when root's and writable by no one else.
    read = _named(held, "Read the recorded verdict")["when"]
    assert "_nccl_record_stat.stat.uid == 0" in read and "not _nccl_record_stat.stat.islnk" in read


def test_the_sweeps_run_only_on_the_plans_run():
    measure = _tasks("measure.yml")
    # The sweep's steps are one include, entered only when nothing says why it cannot run.
    assert _named(measure, "Sweep, or report")["when"] == "_nccl_verify_skip | length == 0"
    steps = _tasks("sweep.yml")
    sweep = _named(steps, "Run the all-reduce sweep")
    assert "_nccl_verify_plan.action == 'run'" in sweep["when"]
    skip = _named(steps, "recorded verdict instead")
    assert "_nccl_verify_plan.action == 'skip'" in skip["when"]
    # A refused sweep stops the run (unless nccl_verify_fail_on_error is false).
    verdict = _named(_tasks("verify.yml"), "stop on a problem")
    assert "_nccl_refused" in verdict["ansible.builtin.assert"]["that"]
    assert (
        verdict["vars"]["_nccl_refused"]
        == "{{ _nccl_verify_plan.action | default('') == 'refuse' }}"
    )
    keep = _named(steps, "Keep the verdict")["ansible.builtin.copy"]
    assert keep["dest"] == "{{ _nccl_verify_record }}" and keep["owner"] == "root"
    assert keep["mode"] == "0640"
    autotune = _named(_tasks("autotune.yml"), "Measure the derived env")
    assert "_nccl_autotune_plan.action == 'run'" in autotune["when"]
    rolevars = yaml.safe_load((ROOT / "roles/nccl/vars/main.yml").read_text())
    assert rolevars["_nccl_verify_record"] == "{{ gpuhost_state_dir }}/nccl-verify.json"


def test_processes_from_the_real_csv_query():
    # The query held.yml runs, recorded on an H200 (tests/fixtures/nccl/h200x1-compute-apps).
    base = ROOT / "tests" / "fixtures" / "nccl" / "h200x1-compute-apps"

    def rows(name):
        return rr.gpu_processes((base / name).read_text().rsplit("rc=", 1)[0])

    assert rows("idle.csv") == [] and rows("after.csv") == []
    held = rows("held.csv")
    assert held == [{"pid": 477, "name": "/opt/torch/.venv/bin/python", "used_mib": 8710}]
    # Held by a process the server unit does not own: the sweep still does not run.
    assert rr.plan(INPUTS, {}, held, False, False)["action"] == "defer"
    assert rr.plan(INPUTS, {}, rows("idle.csv"), False, False)["action"] == "run"
