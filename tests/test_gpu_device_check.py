"""The product against a real GPU machine's `gpuhost check -i inventory/local` (recorded in
tests/fixtures/gpu-device-check/, SOURCE.md says where and how): what preflight and check mode
said there is what the code says today for the same host facts."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.gpuhost.gpu.plugins.module_utils import (
    gpuhost_check_mode,
    gpuhost_python_env,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_hostfacts import collect_host
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_preflight import (
    preflight_findings,
)
from gpuhost_fakes import FakeProbe

FIXTURES = Path(__file__).parent / "fixtures" / "gpu-device-check"
LOCK = "sglang-0.5.10.post1-cu128.txt"
# The host, as the record shows it: Ubuntu 24.04's Python 3.12, a lock resolved for 3.11.
HOST = dict(
    system_python="/usr/bin/python3",
    host_version="3.12.3",
    lock_python="3.11",
    lock_name=LOCK,
    install_dir="/opt/gpuhost/python",
    os_name="Ubuntu 24.04.3 LTS",
)


def _report(name: str) -> dict:
    return json.loads((FIXTURES / f"report-{name}.json").read_text())


def _finding(report: dict, check: str) -> dict:
    (found,) = [f for f in report["findings"]["localhost"] if f["check"] == check]
    return found


def test_the_recorded_lock_is_still_the_default_lane():
    assert (Path(__file__).parents[1] / "locks" / LOCK).is_file()


def test_the_python_refusal_on_ubuntu_24_04_is_what_the_rule_says():
    recorded = _finding(_report("default"), "python_env.python")
    assert gpuhost_python_env.python_fit_finding("system", **HOST) == recorded
    assert recorded["status"] == "fail" and "Ubuntu 24.04.3 LTS" in recorded["message"]


def test_the_refusal_came_before_any_change():
    report = _report("default")
    assert report["rc"] != 0 and report["changed_tasks"] == []
    assert [s["name"] for s in report["stages"]] == ["preflight"]


def test_with_a_managed_python_preflight_passes_and_check_mode_says_what_it_could_not_see():
    report = _report("managed")
    assert gpuhost_python_env.python_fit_finding("managed", **HOST) == _finding(
        report, "python_env.python"
    )
    spots = gpuhost_check_mode.blind_spots(True, False, {"gpuhost": False})
    assert gpuhost_check_mode.finding(spots) == [_finding(report, "check_mode.unseen")]
    planned = {t["task"] for t in report["changed_tasks"]}
    assert "base : Create the service account" in planned


def test_a_host_without_systemd_now_stops_at_preflight():
    """The managed run got past preflight and failed in model_cache, where systemctl cannot run
    without systemd. The same host (no /run/systemd/system; PID 1 is the machine's own process
    supervisor, whose name the record does not hold) now gets one preflight fail, before any
    change."""
    log = (FIXTURES / "check-managed.txt").read_text()
    assert "model_cache : Read the state of the download unit: Error executing command." in log
    probe = FakeProbe(files={"/proc/1/comm": "process_api\n"})  # no /run/systemd/system
    host = collect_host(probe)
    assert host["init"] == {"systemd": False, "pid1": "process_api"}
    gpu = {"present": False, "count": 0, "gpus": [], "pci_devices": [], "driver": {}}
    (found,) = [f for f in preflight_findings(gpu, host, {}) if f["check"] == "preflight.systemd"]
    assert found["status"] == "fail" and "PID 1 is 'process_api'" in found["message"]
