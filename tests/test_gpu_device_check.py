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
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_preflight import (
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
    assert host["init"] == {"systemd": False, "pid1": "process_api", "systemd_version": "n/a"}
    gpu = {"present": False, "count": 0, "gpus": [], "pci_devices": [], "driver": {}}
    (found,) = [f for f in preflight_findings(gpu, host, {}) if f["check"] == "preflight.systemd"]
    assert found["status"] == "fail" and "PID 1 is 'process_api'" in found["message"]


# --- The re-record after preflight.systemd (2026-12-06, an H100 on the same machine image) ---

RECORD_2 = FIXTURES / "h100-2026-12-06"


def _report_2(name: str) -> dict:
    return json.loads((RECORD_2 / f"report-{name}.json").read_text())


def _finding_2(report: dict, check: str) -> dict:
    (found,) = [f for f in report["findings"]["localhost"] if f["check"] == check]
    return found


def _systemd_rule_for_the_recorded_host() -> dict:
    """What preflight says today for the host the record shows: no /run/systemd/system, PID 1
    named as machine.txt recorded it (`cat /proc/1/comm`)."""
    machine = (RECORD_2 / "machine.txt").read_text().splitlines()
    assert any("/run/systemd/system': No such file or directory" in line for line in machine)
    pid1 = machine[machine.index(next(m for m in machine if "/run/systemd/system" in m)) + 1]
    host = collect_host(FakeProbe(files={"/proc/1/comm": pid1 + "\n"}))
    gpu = {"present": False, "count": 0, "gpus": [], "pci_devices": [], "driver": {}}
    (found,) = [f for f in preflight_findings(gpu, host, {}) if f["check"] == "preflight.systemd"]
    return found


def test_the_managed_run_now_stops_at_the_preflight_gate_before_any_change():
    """The same command that ended in model_cache's bare "Error executing command." on
    2026-12-03 now stops in preflight, naming PID 1, with nothing planned or changed."""
    report = _report_2("managed")
    assert report["rc"] != 0 and report["changed_tasks"] == []
    assert [s["name"] for s in report["stages"]] == ["preflight"]
    assert _finding_2(report, "preflight.systemd") == _systemd_rule_for_the_recorded_host()
    (failed,) = report["failed_tasks"]
    assert failed["task"] == "preflight : Stop before any change when a check failed"
    assert failed["message"].startswith("preflight.systemd | not booted with systemd")
    log = (RECORD_2 / "check-managed.txt").read_text()
    assert "model_cache :" not in log and "FAIL  localhost  preflight.systemd" in log
    # With the managed Python the Python rule passes; systemd is the one failure.
    fails = [f["check"] for f in report["findings"]["localhost"] if f["status"] == "fail"]
    assert fails == ["preflight.systemd"]


def test_the_default_run_names_both_failures_in_one_gate():
    """Default settings on Ubuntu 24.04 without systemd: both fails in the one gate message,
    each with its fix, so the user fixes both before the next run."""
    report = _report_2("default")
    assert report["rc"] != 0 and report["changed_tasks"] == []
    fails = {f["check"] for f in report["findings"]["localhost"] if f["status"] == "fail"}
    assert fails == {"preflight.systemd", "python_env.python"}
    (failed,) = report["failed_tasks"]
    assert "preflight.systemd |" in failed["message"]
    assert "python_env.python |" in failed["message"]
    assert gpuhost_python_env.python_fit_finding("system", **HOST) == _finding_2(
        report, "python_env.python"
    )


def test_preflight_alone_reports_every_finding_and_fails_on_the_host_without_systemd():
    """`-t preflight`: exit 0 on 2026-12-03 (no systemd rule then); now non-zero, with the
    GPU findings of a real H100 all there."""
    report = _report_2("preflight")
    assert report["rc"] != 0 and report["changed_tasks"] == []
    checks = {f["check"]: f["status"] for f in report["findings"]["localhost"]}
    for check in ("preflight.gpu_present", "preflight.driver", "preflight.pcie_links"):
        assert checks[check] == "pass"
    assert checks["preflight.systemd"] == "fail"
