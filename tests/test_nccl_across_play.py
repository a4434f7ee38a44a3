"""Role nccl's entry point `across` (tasks/across.yml) in a real ansible-playbook run over two
local "nodes" of one serving group: every member runs the sweep in the same task with its own
node rank and rank 0's address, or none does; each node judges its own result. The host reads
are set by the play and the sweep's Python is a test double (tests/fixtures/nccl-across/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuhost_fakes import run_playbook

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "nccl-across"


def _run(tmp_path, *args, busbw="2.0,2.0"):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    proc = run_playbook(
        [
            FIXTURE / "play.yml",
            "-i",
            FIXTURE / "inventory.yml",
            "-e",
            f"ansible_python_interpreter={sys.executable} out={out}",
            "-e",
            f"nccl_verify_python={FIXTURE / 'fake_python'} gpuhost_base_dir={tmp_path / 'opt'}",
            "-e",
            f"gpuhost_config_dir={tmp_path / 'etc'} gpuhost_state_dir={tmp_path / 'var'}",
            *args,
        ],
        tmp_path / "facts",
        env={"GPUHOST_TEST_ACROSS_OUT": str(out), "GPUHOST_TEST_ACROSS_BUSBW": busbw},
    )
    results = {
        p.stem.split("-", 1)[1]: json.loads(p.read_text()) for p in out.glob("result-*.json")
    }
    argvs = {p.stem: json.loads(p.read_text()) for p in out.glob("argv-node*.json")}
    return proc, results, argvs


def _across(results, host):
    return next(f for f in results[host]["findings"] if f["check"] == "nccl.group.across")


def test_every_node_runs_with_its_rank_and_judges_its_own_result(tmp_path):
    proc, results, argvs = _run(tmp_path, busbw="2.0,0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(argvs) == ["argv-node0", "argv-node1"]
    for rank in (0, 1):
        cfg = json.loads(argvs[f"argv-node{rank}"][2])
        assert cfg["nnodes"] == 2 and cfg["node_rank"] == rank and cfg["nproc"] == 1
        assert cfg["master_addr"] == "10.0.0.1" and cfg["master_port"] == 20000
        assert cfg["candidates"] == [{"name": "derived", "env": {"NCCL_SOCKET_IFNAME": "=eth1"}}]
    assert results["gpu-a"]["across"]["status"] == "pass"
    slow = results["gpu-b"]["across"]
    assert slow["status"] == "fail" and "gpu-b (node 1 of group big" in slow["message"]
    assert "over TCP sockets on eth1" in slow["diagnosis"] and "~1.25 GB/s" in slow["diagnosis"]
    assert _across(results, "gpu-b")["status"] == "fail"


def test_a_failure_stops_the_play_when_asked(tmp_path):
    proc, _, _ = _run(tmp_path, "-e", "nccl_verify_fail_on_error=true", busbw="2.0,0.5")
    assert proc.returncode != 0
    assert "peak busbw 0.50 GB/s, threshold 1 GB/s" in proc.stdout


def test_one_held_node_means_no_node_runs(tmp_path):
    proc, results, argvs = _run(tmp_path, "-e", "held=gpu-b")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert argvs == {}
    for host in ("gpu-a", "gpu-b"):
        assert results[host]["across"]["status"] == "skipped"
        assert "gpu-b: sglang-server is active" in results[host]["across"]["message"]
        assert _across(results, host)["status"] == "warn"


def test_a_node_left_out_of_the_play_means_no_run(tmp_path):
    proc, results, argvs = _run(tmp_path, "--limit", "gpu-a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert argvs == {} and list(results) == ["gpu-a"]
    assert "missing gpu-b" in results["gpu-a"]["across"]["message"]
