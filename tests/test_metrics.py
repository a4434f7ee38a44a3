"""Role metrics' pure parts (plugins/plugin_utils/gpuhost_metrics.py): file_sd fragments, and
the Grafana dashboard's metric names against what the exporters really export: sglang
0.5.10.post1 (data/metrics/sglang-0.5.10.post1.txt, read from the wheel by
tools/sglang_metric_names.py), DCGM exporter's default counters, the node exporter, and the
SGLang stand-in's own /metrics and the DCGM exporter stand-in's (test doubles, started here
on loopback)."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_metrics as gm

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "dashboards" / "gpuhost-serving.json"
LISTS = ROOT / "data" / "metrics"
STANDIN = ROOT / "tests" / "standin" / "sglang_standin.py"
PORT = 18511  # this branch's port range (18500-18599)


def known(name: str) -> set[str]:
    return gm.read_name_list((LISTS / name).read_text())


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_file_sd_groups():
    hosts = [
        {"inventory_hostname": "a", "gpuhost_metrics": {"targets": {"node": "10.0.0.1:9100"}}},
        {"inventory_hostname": "b", "gpuhost_metrics": {"targets": {"sglang": "127.0.0.1:30000"}}},
        {"inventory_hostname": "c"},
    ]
    assert gm.file_sd_groups(hosts, "node") == [
        {"targets": ["10.0.0.1:9100"], "labels": {"gpuhost_host": "a", "gpuhost_job": "node"}}
    ]
    assert gm.file_sd_groups(hosts, "gpu") == []
    with pytest.raises(ValueError, match="one of node, gpu, sglang"):
        gm.file_sd_groups(hosts, "dcgm")


def test_dashboard_imports_cleanly(dashboard):
    assert dashboard["title"] and dashboard["uid"] == "gpuhost-serving"
    assert isinstance(dashboard["schemaVersion"], int)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in dashboard["panels"]:
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets") or []:
            assert target["refId"] and target["expr"]
            assert target["datasource"]["uid"] == "${datasource}"
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for word in ("throughput", "time to first token", "inter-token", "queued", "kv cache",
                 "utilisation", "memory bandwidth", "power", "pcie", "xid"):  # fmt: skip
        assert word in titles, word


def test_every_dashboard_metric_is_really_exported(dashboard):
    everything = (
        known("sglang-0.5.10.post1.txt")
        | known("dcgm-exporter-default-counters.txt")
        | known("node-exporter.txt")
    )
    assert gm.unknown_names(dashboard, everything) == {}
    used = {n for e in gm.expressions(dashboard) for n in gm.metric_names(e)}
    assert {n for n in used if n.startswith("sglang:")} <= known("sglang-0.5.10.post1.txt")
    assert "sglang:time_to_first_token_seconds_bucket" in used


def test_a_misspelt_metric_is_caught(dashboard):
    broken = json.loads(json.dumps(dashboard))
    broken["panels"][1]["targets"][0]["expr"] = "rate(sglang:generation_tokens[1m])"
    everything = (
        known("sglang-0.5.10.post1.txt")
        | known("dcgm-exporter-default-counters.txt")
        | known("node-exporter.txt")
    )
    assert list(gm.unknown_names(broken, everything)) == ["sglang:generation_tokens"]


def test_metric_names_skip_promql_words_labels_and_durations():
    expr = (
        "histogram_quantile(0.95, sum by (le, gpuhost_host) "
        '(rate(sglang:inter_token_latency_seconds_bucket{job="x"}[5m]))) * 1024'
    )
    assert gm.metric_names(expr) == {"sglang:inter_token_latency_seconds_bucket"}


def test_sglang_list_has_the_histograms_and_counters_exposed():
    names = known("sglang-0.5.10.post1.txt")
    assert "sglang:e2e_request_latency_seconds_count" in names
    assert "sglang:num_requests_total" in names and "sglang:num_requests_total_total" not in names


def scrape_once(argv: list[str], port: int) -> str:
    """Start an exporter (argv) that must bind 127.0.0.1:port, read its /metrics once it
    answers, stop it; the text ("" if it never answered)."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            pytest.fail(f"port {port} is taken: this test needs it")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    return r.read().decode()
            except OSError:
                time.sleep(0.1)
        return ""
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_standin_exports_real_names_the_dashboard_reads(dashboard):
    text = scrape_once(
        [sys.executable, str(STANDIN), "--port", str(PORT), "--enable-metrics",
         "--standin-load-seconds", "0.1", "--standin-warmup-seconds", "0.1"],
        PORT,
    )  # fmt: skip
    exported = {line.split()[0].split("{")[0] for line in text.splitlines()
                if line and not line.startswith("#")}  # fmt: skip
    assert exported, "the stand-in served no metrics"
    assert exported <= known("sglang-0.5.10.post1.txt")
    used = {n for e in gm.expressions(dashboard) for n in gm.metric_names(e)}
    assert exported <= used


# --- the DCGM exporter stand-in (a test double in molecule/nvidia/standin_repo.py) -----------

DCGM_PORT = 39301  # this branch's port range (39300-39399)


def standin_repo():
    spec = importlib.util.spec_from_file_location(
        "standin_repo", ROOT / "molecule" / "nvidia" / "standin_repo.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dcgm_standin_ships_the_real_default_counters():
    repo = standin_repo()
    names = {name for name, _, _ in repo.DCGM_DEFAULT_COUNTERS}
    assert names == known("dcgm-exporter-default-counters.txt")
    assert repo.DCGM_EXPORTER_PAIR.split("-")[1] == repo.DCGM_EXPORTER_VERSION.split("-")[0]
    assert f"1:{repo.DCGM_EXPORTER_PAIR.split('-')[0]}-1" == repo.DCGM_VERSION
    unit = repo.DCGM_EXPORTER_UNIT
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv" in unit


def test_the_dcgm_standin_serves_the_dashboards_series_on_its_address(dashboard, tmp_path):
    repo = standin_repo()
    script = tmp_path / "dcgm-exporter"
    script.write_text(repo.DCGM_EXPORTER_SCRIPT.replace("@PAIR@", repo.DCGM_EXPORTER_PAIR))
    counters = tmp_path / "default-counters.csv"
    counters.write_text(repo.dcgm_counters_csv())
    bad = subprocess.run([sys.executable, str(script), "--address", "nowhere"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert bad.returncode != 0 and "expected HOST:PORT" in bad.stderr
    text = scrape_once(
        [sys.executable, str(script), "-f", str(counters), "--address", f"127.0.0.1:{DCGM_PORT}"],
        DCGM_PORT,
    )
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    exported = {line.split("{")[0] for line in series}
    assert exported == known("dcgm-exporter-default-counters.txt")
    used = {n for e in gm.expressions(dashboard) for n in gm.metric_names(e)}
    assert {n for n in used if n.startswith("DCGM_")} <= exported
    for line in series:
        for label in ("gpu=", "UUID=", "modelName=", "hostname="):
            assert label in line, line
    assert "# TYPE DCGM_FI_DEV_PCIE_TX_THROUGHPUT counter" in text
