"""Metrics on real systemd: Debian's node exporter and Prometheus, the SGLang stand-in (a test
double) with --enable-metrics, and the DCGM exporter installed by roles metrics and cuda_repo
from the stand-in NVIDIA repository (a test double: ../nvidia/standin_repo.py). Runs in
molecule's verify step, after converge and idempotence: first the state converge left and
Prometheus's own view (every target up, the dashboard's node, GPU and stand-in series
present), then metrics off and on again through ansible-playbook, each twice: the second run
of each must change nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_metrics as gm

ROOT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", Path(__file__).resolve().parents[1]))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", "")
PROM = "http://127.0.0.1:9090"
GPU_UNIT = "nvidia-dcgm-exporter"
JOBS = ["gpuhost-gpu", "gpuhost-node", "gpuhost-sglang"]

pytestmark = pytest.mark.skipif(not INVENTORY, reason="runs under molecule verify")


def prom(host, path: str) -> dict:
    out = host.check_output(f"curl -sf '{PROM}{path}'")
    data = json.loads(out)
    assert data["status"] == "success", out
    return data["data"]


def converge(extra: dict) -> tuple[int, int, str]:
    cmd = [
        "ansible-playbook",
        "-i",
        INVENTORY,
        str(SCENARIO / "converge.yml"),
        "-e",
        json.dumps(extra),
    ]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    out = proc.stdout + proc.stderr
    match = re.search(r"changed=(\d+)\s+unreachable=\d+\s+failed=\d+", out)
    assert match, out[-3000:]
    return proc.returncode, int(match.group(1)), out


def test_units_run_on_loopback(host):
    for unit in ("prometheus-node-exporter", "prometheus", "sglang-server", GPU_UNIT):
        assert host.service(unit).is_running, unit
    listening = host.check_output("ss -Htlnp")
    for port in ("9100", "9090", "9400"):
        assert f"127.0.0.1:{port}" in listening, listening
    for port in ("9100", "9400"):
        for anywhere in ("*", "0.0.0.0", "[::]"):
            assert f"{anywhere}:{port} " not in listening, listening
    assert (
        "--enable-metrics" in host.file("/etc/systemd/system/sglang-server.service").content_string
    )


@pytest.mark.parametrize("unit", ["prometheus-node-exporter", "prometheus", GPU_UNIT])
def test_units_are_hardened(host, unit):
    out = host.check_output(f"systemd-analyze security {unit}.service --no-pager")
    score = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", out).group(1))
    assert score <= 4.0, out[-1500:]


def test_gpu_exporter_is_the_standin_package_with_gpuhosts_drop_ins(host):
    version = host.check_output("dpkg-query -W -f '${Version}' datacenter-gpu-manager-exporter")
    assert version == "4.8.3-1"
    assert host.check_output("dpkg-query -W -f '${Version}' datacenter-gpu-manager-4-core") == (
        "1:4.6.0-1"
    )
    # Installed through apt from the repository role cuda_repo configured, not from a file.
    policy = host.check_output("apt-cache policy datacenter-gpu-manager-exporter")
    assert "file:/srv/nvidia-standin/debian12/x86_64" in policy, policy
    assert (
        "gpuhost TEST DOUBLE"
        in host.file("/usr/share/doc/datacenter-gpu-manager-exporter/STAND-IN").content_string
    )
    assert host.file("/etc/apt/sources.list.d/gpuhost-cuda.sources").contains(
        "URIs: file:///srv/nvidia-standin/debian12/x86_64/"
    )
    shown = host.check_output(f"systemctl show -p ExecStart -p DropInPaths {GPU_UNIT}")
    assert "--address 127.0.0.1:9400" in shown and "gpuhost-hardening.conf" in shown, shown


def test_every_target_is_up_in_prometheus(host):
    deadline = time.monotonic() + 90
    while True:
        targets = prom(host, "/api/v1/targets?state=active")["activeTargets"]
        jobs = {t["labels"]["job"]: t["health"] for t in targets}
        if sorted(jobs) == JOBS and set(jobs.values()) == {"up"}:
            break
        assert time.monotonic() < deadline, json.dumps(targets, indent=1)[-3000:]
        time.sleep(2)
    up = prom(host, "/api/v1/query?query=up")["result"]
    assert sorted(r["metric"]["job"] for r in up) == JOBS
    assert {r["value"][1] for r in up} == {"1"}
    assert {r["metric"]["gpuhost_host"] for r in up} == {"gpuhost-metrics-deb12"}


def test_dashboard_series_exist_in_prometheus(host):
    dashboard = json.loads((ROOT / "dashboards" / "gpuhost-serving.json").read_text())
    used = {n for e in gm.expressions(dashboard) for n in gm.metric_names(e)}
    node = {n for n in used if n.startswith("node_")}
    dcgm = {n for n in used if n.startswith("DCGM_FI_")}
    standin = {"sglang:num_running_reqs", "sglang:num_requests_total"}  # what it exports
    assert node and dcgm and standin <= used
    for name in sorted(node | dcgm | standin):
        result = prom(host, f"/api/v1/query?query={name}")["result"]
        assert result, f"{name}: no series in Prometheus"
    # The GPU series carry the real exporter's labels, one series per GPU.
    for name in sorted(dcgm):
        result = prom(host, f"/api/v1/query?query={name}")["result"]
        for series in result:
            labels = series["metric"]
            assert labels["job"] == "gpuhost-gpu", labels
            assert {"gpu", "UUID", "modelName"} <= set(labels), labels
        assert len({r["metric"]["UUID"] for r in result}) == len(result), result


def test_file_sd_fragments_on_the_controller():
    fragments = Path(INVENTORY).parent / "file_sd"
    node = json.loads((fragments / "gpuhost-node.json").read_text())
    assert node == [
        {"targets": ["127.0.0.1:9100"],
         "labels": {"gpuhost_host": "gpuhost-metrics-deb12", "gpuhost_job": "node"}}
    ]  # fmt: skip
    gpu = json.loads((fragments / "gpuhost-gpu.json").read_text())
    assert gpu == [
        {"targets": ["127.0.0.1:9400"],
         "labels": {"gpuhost_host": "gpuhost-metrics-deb12", "gpuhost_job": "gpu"}}
    ]  # fmt: skip


def test_off_then_on_again_both_idempotent(host):
    off = {"gpuhost_metrics_enabled": False}
    rc, _, out = converge(off)
    assert rc == 0, out[-3000:]
    rc, changed, out = converge(off)
    assert rc == 0 and changed == 0, out[-3000:]
    assert not host.service("prometheus-node-exporter").is_running
    assert not host.service(GPU_UNIT).is_running
    assert not host.service(GPU_UNIT).is_enabled
    assert (
        "--enable-metrics"
        not in host.file("/etc/systemd/system/sglang-server.service").content_string
    )
    rc, _, out = converge({})
    assert rc == 0, out[-3000:]
    rc, changed, out = converge({})
    assert rc == 0 and changed == 0, out[-3000:]
    assert host.service("prometheus-node-exporter").is_running
    assert host.service(GPU_UNIT).is_running and host.service(GPU_UNIT).is_enabled


# --- gpuhost doctor on the sandbox: no GPU, the real server unit with the stand-in ----------


def doctor(tmp_path) -> tuple[int, dict]:
    gpuhost = Path(sys.executable).parent / "gpuhost"
    cmd = [str(gpuhost), "--runs-dir", str(tmp_path), "doctor", "-i", INVENTORY, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    assert report, proc.stderr[-3000:]
    found = report["findings"]["gpuhost-metrics-deb12"]
    return proc.returncode, {f["check"]: f for f in found}


def test_doctor_on_the_sandbox(host, tmp_path):
    rc, found = doctor(tmp_path)
    assert rc == 0, found
    assert found["doctor.gpu"]["status"] == "warn"
    assert "GPU checks skipped" in found["doctor.gpu"]["message"]
    for check in ("doctor.server", "doctor.journal", "doctor.drift", "doctor.disk",
                  "verify.health", "verify.correctness"):  # fmt: skip
        assert found[check]["status"] == "pass", found[check]
    assert "doctor.xid" not in found  # a GPU check: skipped without a GPU


def test_doctor_sees_drift_and_a_stopped_server(host, tmp_path):
    unit = "/etc/systemd/system/sglang-server.service"
    host.run(f"cp {unit} /tmp/unit.bak && sed -i 's/^LimitNOFILE=.*/LimitNOFILE=1024/' {unit}")
    try:
        rc, found = doctor(tmp_path / "drift")
        assert rc == 0 and found["doctor.drift"]["status"] == "warn"
        assert "unit (LimitNOFILE)" in found["doctor.drift"]["message"]
    finally:
        host.run(f"cp /tmp/unit.bak {unit} && systemctl daemon-reload")
    host.run("systemctl stop sglang-server")
    try:
        rc, found = doctor(tmp_path / "stopped")
        assert rc == 1 and found["doctor.server"]["status"] == "fail"
    finally:
        host.run("systemctl start sglang-server")
        for _ in range(60):
            if host.run("curl -sf http://127.0.0.1:30000/health").rc == 0:
                break
            time.sleep(1)
