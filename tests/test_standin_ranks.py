"""The SGLang stand-in's multi-node protocol (tests/standin/sglang_pkg, a test double; issue 30).

As SGLang across hosts: rank 0 opens its HTTP port only once every other rank has joined at
--dist-init-addr, and gives up with torch's message when one never does; a rank >= 1 serves only
SGLang's dummy health routes; a rank whose peer goes away exits 1. Everything on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

from gpuhost_fakes import STANDIN_SCRIPT, free_port


def start(tmp_path, name, port, dist_port, rank, nnodes=2, join_seconds=30, fault="none"):
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, str(STANDIN_SCRIPT), "--host", "127.0.0.1", "--port", str(port),
         "--standin-load-seconds", "0", "--standin-warmup-seconds", "0",
         "--nnodes", str(nnodes), "--node-rank", str(rank),
         "--dist-init-addr", f"127.0.0.1:{dist_port}",
         "--standin-join-seconds", str(join_seconds), "--standin-fault", fault],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    proc.log = log
    return proc


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return None, b""


def wait_for(predicate, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def stop(*procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        proc.log.close()


def test_rank0_serves_once_rank1_joined_and_rank1_serves_only_health(tmp_path):
    port0, port1 = free_port(range(31400, 31500)), free_port(range(31500, 31600))
    dist = free_port(range(31600, 31700))
    rank0 = start(tmp_path, "rank0", port0, dist, 0)
    try:
        # Alone, rank 0 waits: no HTTP port.
        time.sleep(1.5)
        assert get(port0, "/health")[0] is None
        rank1 = start(tmp_path, "rank1", port1, dist, 1)
        try:
            assert wait_for(lambda: get(port0, "/v1/models")[0] == 200), (
                tmp_path / "rank0.log"
            ).read_text()
            assert json.loads(get(port0, "/v1/models")[1])["data"]
            assert wait_for(lambda: get(port1, "/health")[0] == 200)
            assert get(port1, "/health") == (200, b"")
            assert get(port1, "/ping") == (200, b"")
            assert get(port1, "/v1/models")[0] == 404
            assert "rank 1 joined" in (tmp_path / "rank0.log").read_text()
            # Rank 1 goes away: rank 0's group is broken, it exits 1.
            rank1.kill()
            assert rank0.wait(timeout=20) == 1
            assert "rank 1 closed the connection" in (tmp_path / "rank0.log").read_text()
        finally:
            stop(rank1)
    finally:
        stop(rank0)


def test_a_rank_that_never_joins_fails_rank0_with_torchs_message(tmp_path):
    port0, dist = free_port(range(31700, 31800)), free_port(range(31800, 31900))
    rank0 = start(tmp_path, "rank0", port0, dist, 0, nnodes=3, join_seconds=2)
    try:
        assert rank0.wait(timeout=30) == 1
        log = (tmp_path / "rank0.log").read_text()
        assert "Timed out after 2 seconds waiting for clients. 1/3 clients joined." in log
        assert get(port0, "/health")[0] is None
    finally:
        stop(rank0)


def test_a_rank_of_another_group_size_is_refused(tmp_path):
    port0, port1 = free_port(range(31900, 32000)), free_port(range(32000, 32100))
    dist = free_port(range(32100, 32200))
    rank0 = start(tmp_path, "rank0", port0, dist, 0, nnodes=2, join_seconds=4)
    odd = start(tmp_path, "odd", port1, dist, 1, nnodes=3, join_seconds=4)
    try:
        assert rank0.wait(timeout=30) == 1
        assert "refused 127.0.0.1: rank 1 nnodes 3" in (tmp_path / "rank0.log").read_text()
        assert odd.wait(timeout=30) == 1
    finally:
        stop(rank0, odd)


def test_a_rank_with_fault_never_joins_keeps_its_port_closed_and_rank0_times_out(tmp_path):
    port0, port1 = free_port(range(32200, 32300)), free_port(range(32300, 32400))
    dist = free_port(range(32400, 32500))
    # The fault is the group's config: rank 0 has it too and is not affected.
    rank0 = start(tmp_path, "rank0", port0, dist, 0, join_seconds=3, fault="never-joins")
    rank1 = start(tmp_path, "rank1", port1, dist, 1, join_seconds=3, fault="never-joins")
    try:
        assert rank0.wait(timeout=30) == 1
        assert "1/2 clients joined" in (tmp_path / "rank0.log").read_text()
        assert rank1.poll() is None and get(port1, "/health")[0] is None
    finally:
        stop(rank0, rank1)


def load_probe():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "plugins" / "modules" / "sglang_probe.py"
    spec = importlib.util.spec_from_file_location("gpuhost_test_sglang_probe_ranks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def probe_params(port, name, rank):
    return {"host": "127.0.0.1", "port": port, "served_model_name": name, "api_key": "",
            "correctness": False, "prompt": "", "expect": "42", "max_tokens": 8,
            "request_timeout": 2, "node_rank": rank}  # fmt: skip


def test_the_gate_probe_passes_a_joined_rank_and_refuses_a_rank_that_serves_alone(tmp_path):
    """The start gate (sglang_probe) for a rank >= 1: port closed until it joined ("has not
    joined"), then `joined` on the dummy /health; a server that lists the served name while
    probed as a rank >= 1 is `standalone` (a wrong --node-rank or --nnodes)."""
    http_phase = load_probe().http_phase
    port0, port1 = free_port(range(32500, 32600)), free_port(range(32600, 32700))
    dist = free_port(range(32700, 32800))
    rank1 = start(tmp_path, "rank1", port1, dist, 1)
    rank0 = None
    try:
        phase, detail, _ = http_phase(probe_params(port1, "x", 1))
        assert phase == "port_closed" and "rank 1 has not joined" in detail
        rank0 = start(tmp_path, "rank0", port0, dist, 0)
        assert wait_for(lambda: get(port0, "/v1/models")[0] == 200)
        name = json.loads(get(port0, "/v1/models")[1])["data"][0]["id"]
        assert wait_for(lambda: get(port1, "/health")[0] == 200)
        assert http_phase(probe_params(port1, name, 1))[0] == "joined"
        assert http_phase(probe_params(port0, name, 1))[0] == "standalone"
        assert http_phase(probe_params(port0, name, 0))[0] == "healthy"
        # Rank 1 probed as rank 0 misses the served name: never healthy.
        assert http_phase(probe_params(port1, name, 0))[0] == "models_missing"
    finally:
        stop(*[p for p in (rank0, rank1) if p is not None])
