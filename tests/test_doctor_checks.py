"""gpuhost doctor's checks (plugins/module_utils/gpuhost_doctor.py) over recorded and made
captures: each check passes on the real 1x H200 capture and fails (or warns) on its fault.

Real captures: tests/fixtures/gpu-hosts/h200x1-real/ and tests/fixtures/doctor/h200x1-*
(device runs); made ones: tests/fixtures/doctor/ (SOURCE.md says how each was made).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_doctor as doc

FIX = Path(__file__).parent / "fixtures"
DOCTOR = FIX / "doctor"
REAL_XML = FIX / "gpu-hosts" / "h200x1-real" / "nvidia-smi-q.xml"


def gpus(path: Path) -> list[dict]:
    return doc.parse_health_xml(path.read_text(encoding="utf-8"))["gpus"]


def statuses(findings: list[dict]) -> dict[str, str]:
    return {f["check"]: f["status"] for f in findings}


@pytest.fixture(scope="module")
def real() -> list[dict]:
    return gpus(REAL_XML)


def test_real_capture_parses(real):
    (gpu,) = real
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["power_limit_w"] == 700.0 and gpu["power_default_w"] == 700.0
    assert gpu["remapped"] == {"corr": 0, "unc": 0, "pending": False, "failure": False}
    assert gpu["events"]["gpu_idle"] is True and gpu["events"]["sw_power_cap"] is False
    assert gpu["ecc"]["volatile"]["dram_uncorrectable"] == 0
    assert gpu["pcie_tx_kbs"] == 1053.0 and gpu["processes"] == []


# --- Xid ---------------------------------------------------------------------------------


def test_xid_real_log_without_xid_passes():
    log = (DOCTOR / "kernel-log-xid.txt").read_text().splitlines()[:3]
    assert statuses(doc.check_xid("\n".join(log))) == {"doctor.xid": "pass"}


def test_xid_severe_codes_fail_naming_them():
    (f,) = doc.check_xid((DOCTOR / "kernel-log-xid.txt").read_text())
    assert f["status"] == "fail"
    assert "4 Xid event(s)" in f["message"] and "codes 13, 79, 94" in f["message"]
    assert "needs attention: 79, 94" in f["message"]
    assert "PCI:0000:03:00" in f["message"]


def test_xid_application_codes_warn():
    (f,) = doc.check_xid((DOCTOR / "kernel-log-xid-warn.txt").read_text())
    assert f["status"] == "warn" and "codes 13, 43" in f["message"]


def test_xid_unreadable_log_warns():
    (f,) = doc.check_xid(None)
    assert f["status"] == "warn" and "not readable" in f["message"]


# --- memory: remapped rows, retired pages, ECC ----------------------------------------


def test_memory_real_passes(real):
    assert statuses(doc.check_memory_errors(real)) == {
        "doctor.remapped_rows": "pass",
        "doctor.ecc": "pass",
    }


def test_remap_failure_fails():
    found = doc.check_memory_errors(gpus(DOCTOR / "nvidia-smi-q-remap-failure.xml"))
    remap = next(f for f in found if f["check"] == "doctor.remapped_rows")
    assert remap["status"] == "fail"
    assert "row remapping failed" in remap["message"] and "pending" in remap["message"]
    assert "RMA" in remap["fix"]


def test_remap_pending_alone_warns(real):
    gpu = dict(real[0], remapped={"corr": 0, "unc": 1, "pending": True, "failure": False})
    (remap, _) = doc.check_memory_errors([gpu])
    assert remap["status"] == "warn" and "reset" in remap["fix"]


def test_retired_pages_pending_warns(real):
    gpu = dict(real[0], remapped=None, retired={"pending": True, "double_bit_retirement": 2})
    (remap, _) = doc.check_memory_errors([gpu])
    assert remap["status"] == "warn" and "2 page(s) retired" in remap["message"]


def test_ecc_uncorrectable_fails():
    found = doc.check_memory_errors(gpus(DOCTOR / "nvidia-smi-q-ecc-uncorrectable.xml"))
    ecc = next(f for f in found if f["check"] == "doctor.ecc")
    assert ecc["status"] == "fail"
    assert "GPU0 3 uncorrectable" in ecc["message"] and "12 corrected" in ecc["message"]


def test_ecc_corrected_only_warns(real):
    volatile = dict(real[0]["ecc"]["volatile"], dram_correctable=5)
    gpu = dict(real[0], ecc={"volatile": volatile, "aggregate": {}})
    ecc = doc.check_memory_errors([gpu])[1]
    assert ecc["status"] == "warn" and "5 corrected" in ecc["message"]


# --- clocks, power, PCIe, persistence ----------------------------------------------------


def test_clocks_real_idle_passes(real):
    assert statuses(doc.check_clocks(real)) == {"doctor.clocks": "pass"}


def test_clocks_throttled_names_each_reason():
    found = statuses(doc.check_clocks(gpus(DOCTOR / "nvidia-smi-q-throttled.xml")))
    assert found == {
        "doctor.clocks.hw_thermal_slowdown": "fail",
        "doctor.clocks.sw_power_cap": "warn",
        "doctor.clocks.sync_boost": "warn",
    }


def test_clocks_from_query_bit_mask(real):
    gpu = dict(real[0], events={})
    found = statuses(doc.check_clocks([gpu], {0: "0x0000000000000084"}))
    assert found == {
        "doctor.clocks.hw_power_brake_slowdown": "fail",
        "doctor.clocks.sw_power_cap": "warn",
    }


def test_decode_event_reasons():
    assert doc.decode_event_reasons("0x0000000000000001") == ["gpu_idle"]
    assert doc.decode_event_reasons("0x0000000000000044") == ["sw_power_cap", "hw_thermal_slowdown"]
    assert doc.decode_event_reasons("[N/A]") is None


def test_power_limit(real):
    assert statuses(doc.check_power_limit(real)) == {"doctor.power_limit": "pass"}
    (f,) = doc.check_power_limit(gpus(DOCTOR / "nvidia-smi-q-throttled.xml"))
    assert f["status"] == "warn" and "GPU0 500 W of 700 W default" in f["message"]


def test_pcie_gen_judged_under_load_only(real):
    assert statuses(doc.check_pcie(real)) == {"doctor.pcie": "pass"}
    (f,) = doc.check_pcie(gpus(DOCTOR / "nvidia-smi-q-throttled.xml"))
    assert f["status"] == "warn" and "GPU0 Gen3 of Gen5 at 98% utilisation" in f["message"]
    idle = dict(real[0], pcie=dict(real[0]["pcie"], gen_current=1), util_gpu=0.0)
    (f,) = doc.check_pcie([idle])
    assert f["status"] == "pass" and "while idle" in f["message"]


def test_pcie_width_below_max_warns(real):
    narrow = dict(
        real[0],
        pcie=dict(
            real[0]["pcie"], width_current=8, degraded=True, degraded_reason="width x8 of x16"
        ),
    )
    (f,) = doc.check_pcie([narrow])
    assert f["status"] == "warn" and "x8 of x16" in f["message"]


def test_persistence(real):
    assert statuses(doc.check_persistence(real)) == {"doctor.persistence": "pass"}
    (f,) = doc.check_persistence(gpus(DOCTOR / "nvidia-smi-q-throttled.xml"))
    assert f["status"] == "warn" and "nvidia-persistenced" in f["fix"]


# --- versions, processes ----------------------------------------------------------------

PROC_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 00:21:31 UTC 2025\n"
)


def test_versions_agree():
    found = doc.check_versions(0, "", "580.159.04", PROC_580, ["libnvidia-ml.so.580.159.04"])
    assert statuses(found) == {"doctor.versions": "pass"}


def test_versions_nvml_mismatch_message_fails():
    text = (DOCTOR / "nvidia-smi-mismatch.txt").read_text()
    (f,) = doc.check_versions(18, text, None, PROC_580, [])
    assert f["status"] == "fail" and "Driver/library version mismatch" in f["message"]
    assert "reboot" in f["fix"]


def test_versions_module_vs_library_fails():
    (f,) = doc.check_versions(
        0, "", "580.159.04", PROC_580.replace("580.159.04", "580.95.05"), ["libnvidia-ml.so.1"]
    )
    assert f["status"] == "fail" and "kernel module 580.95.05, NVML 580.159.04" in f["message"]
    (f,) = doc.check_versions(0, "", "580.159.04", PROC_580, ["libnvidia-ml.so.575.57.08"])
    assert f["status"] == "fail" and "libnvidia-ml 575.57.08" in f["message"]


def test_foreign_process_warns():
    throttled = gpus(DOCTOR / "nvidia-smi-q-throttled.xml")
    (f,) = doc.check_processes(throttled, {1, 2}, "sglang-server")
    assert f["status"] == "warn" and "pid 4242 python3 20480 MiB" in f["message"]
    assert statuses(doc.check_processes(throttled, {4242}, "sglang-server")) == {
        "doctor.processes": "pass"
    }


# --- the server: state, journal, drift -------------------------------------------------

ACTIVE = {
    "LoadState": "loaded",
    "ActiveState": "active",
    "SubState": "running",
    "NRestarts": "0",
    "ExecMainStartTimestamp": "@1764583331",
}


def test_server_clean_journal_passes():
    found = doc.check_server(ACTIVE, (DOCTOR / "journal-clean.txt").read_text(), "sglang-server")
    assert statuses(found) == {"doctor.server": "pass", "doctor.journal": "pass"}


def test_server_journal_faults_named():
    found = doc.check_server(
        dict(ACTIVE, NRestarts="2"), (DOCTOR / "journal-faults.txt").read_text(), "sglang-server"
    )
    assert statuses(found) == {
        "doctor.server": "warn",
        "doctor.journal.nan": "warn",
        "doctor.journal.oom": "warn",
        "doctor.journal.nccl": "warn",
    }
    nccl = next(f for f in found if f["check"] == "doctor.journal.nccl")
    assert nccl["message"].startswith("1 line(s)")
    oom = next(f for f in found if f["check"] == "doctor.journal.oom")
    assert "2 line(s)" in oom["message"]  # the OOM and NCCL's 'out of memory' warning
    assert (
        "restarted 2 time(s)" in next(f for f in found if f["check"] == "doctor.server")["message"]
    )


def test_server_failed_or_missing():
    (f, _) = doc.check_server(dict(ACTIVE, ActiveState="failed", Result="exit-code"), "", "s")
    assert f["status"] == "fail" and "exit-code" in f["message"]
    (f,) = doc.check_server({"LoadState": "not-found"}, None, "s")
    assert f["status"] == "warn" and "not installed" in f["message"]


UNIT = "[Service]\nExecStart=/opt/gpuhost/venv/bin/python -m sglang.launch_server --tp 8\n"
ENV = "NCCL_IB_DISABLE=1\nHF_HOME=/var/cache/gpuhost/huggingface\nGPUHOST_SGLANG_API_KEY=s3cret\n"


def test_drift_none():
    found = doc.check_drift(UNIT, UNIT, ENV, ENV, "# nccl\nNCCL_IB_DISABLE=1\n", "sglang-server")
    assert statuses(found) == {"doctor.drift": "pass"}


def test_drift_names_keys_never_values():
    edited_env = ENV.replace("s3cret", "other-key") + "NCCL_P2P_DISABLE=1\n"
    edited_unit = UNIT.replace("--tp 8", "--tp 4")
    (f,) = doc.check_drift(
        edited_unit, UNIT, edited_env, ENV, "NCCL_IB_DISABLE=0\n", "sglang-server"
    )
    assert f["status"] == "warn"
    assert "unit (ExecStart)" in f["message"]
    assert "env (GPUHOST_SGLANG_API_KEY, NCCL_P2P_DISABLE)" in f["message"]
    assert "nccl.env not in the server's env (NCCL_IB_DISABLE)" in f["message"]
    assert "s3cret" not in str(f) and "other-key" not in str(f)


def test_drift_without_known_good_warns():
    (f,) = doc.check_drift(UNIT, None, ENV, None, None, "sglang-server")
    assert f["status"] == "warn" and "never saw this server healthy" in f["message"]


def test_disk_thresholds():
    gib = doc.GIB
    assert doc.check_disk("/c", 100 * gib, 1000 * gib, 50, 5)[0]["status"] == "pass"
    assert doc.check_disk("/c", 20 * gib, 1000 * gib, 50, 5)[0]["status"] == "warn"
    (f,) = doc.check_disk("/c", 2 * gib, 1000 * gib, 50, 5)
    assert f["status"] == "fail" and "2.0 GiB free on /c" in f["message"]


# --- the whole judgement, and the collector over a fake probe -----------------------------


class FakeProbe:
    """Stands in for gpuhost_hostfacts.Probe: commands and files from a dict."""

    def __init__(self, commands: dict, files: dict, free: int | None = 100 * doc.GIB):
        self.commands, self.files, self.free = commands, files, free

    def run(self, argv):
        for prefix, result in self.commands.items():
            if " ".join(argv).startswith(prefix):
                return result
        return None, "", f"{argv[0]} not found"

    def read(self, path):
        return self.files.get(path)

    def listdir(self, path):
        return [p.rsplit("/", 1)[1] for p in self.files if p.rsplit("/", 1)[0] == path] or None

    def statvfs(self, path):
        if self.free is None:
            raise OSError(path)
        return SimpleNamespace(f_bavail=self.free // 4096, f_frsize=4096, f_blocks=10**9)


PARAMS = {
    "nvidia_smi": "nvidia-smi",
    "service": "sglang-server",
    "unit_path": "/etc/systemd/system/sglang-server.service",
    "env_path": "/etc/gpuhost/sglang-server.env",
    "nccl_env_path": "/etc/gpuhost/nccl.env",
    "known_good_dir": "/var/lib/gpuhost/sglang_server/known-good",
    "cache_dir": "/var/cache/gpuhost",
}


def test_no_gpu_skips_gpu_checks_and_says_so():
    cap = doc.collect(FakeProbe({}, {}), PARAMS)
    found = doc.judge(cap, {"cache_dir": "/var/cache/gpuhost"})
    assert statuses(found) == {
        "doctor.gpu": "warn",
        "doctor.server": "warn",
        "doctor.disk": "pass",
    }
    assert "GPU checks skipped (xid, remapped_rows" in found[0]["message"]


def test_collect_and_judge_a_throttled_host_without_leaking_the_env():
    show = "\n".join(f"{k}={v}" for k, v in ACTIVE.items()) + "\nControlGroup=/system.slice/s\n"
    probe = FakeProbe(
        {
            "nvidia-smi -q -x": (0, (DOCTOR / "nvidia-smi-q-throttled.xml").read_text(), ""),
            "journalctl -k": (0, (DOCTOR / "kernel-log-xid-warn.txt").read_text(), ""),
            "systemctl show": (0, show, ""),
            "journalctl -u": (0, (DOCTOR / "journal-clean.txt").read_text(), ""),
        },
        {
            "/proc/driver/nvidia/version": PROC_580,
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04": "",
            "/sys/fs/cgroup/system.slice/s/cgroup.procs": "2345\n",
            PARAMS["unit_path"]: UNIT,
            PARAMS["known_good_dir"] + "/unit": UNIT,
            PARAMS["env_path"]: ENV,
            PARAMS["known_good_dir"] + "/env": ENV,
        },
        free=3 * doc.GIB,
    )
    cap = doc.collect(probe, PARAMS)
    found = statuses(doc.judge(cap, {"cache_dir": PARAMS["cache_dir"]}))
    assert found["doctor.gpu"] == "pass"
    assert found["doctor.xid"] == "warn"
    assert found["doctor.clocks.hw_thermal_slowdown"] == "fail"
    assert found["doctor.processes"] == "warn"
    assert found["doctor.versions"] == "pass"
    assert found["doctor.drift"] == "pass"
    assert found["doctor.disk"] == "fail"
    public = doc.public_captures(cap)
    assert "env" not in public and "s3cret" not in str(public)
    assert public["env_keys"] == ["GPUHOST_SGLANG_API_KEY", "HF_HOME", "NCCL_IB_DISABLE"]


# --- the real device run (tests/fixtures/gpu-hosts/h200x1-day2/SOURCE.md) -----------------

DAY2 = FIX / "gpu-hosts" / "h200x1-day2"


def test_real_load_capture_shows_the_power_cap_and_the_load_process():
    loaded = gpus(DAY2 / "load-q.xml")
    assert statuses(doc.check_clocks(loaded)) == {"doctor.clocks.sw_power_cap": "warn"}
    (f,) = doc.check_processes(loaded, set(), "sglang-server")
    assert f["status"] == "warn" and "python3 10218 MiB" in f["message"]
    assert statuses(doc.check_pcie(loaded)) == {"doctor.pcie": "pass"}
    idle = gpus(DAY2 / "idle-q.xml")
    assert statuses(doc.check_clocks(idle)) == {"doctor.clocks": "pass"}


def test_real_query_bit_masks_decode():
    import csv

    rows = list(csv.reader((DAY2 / "load-query.csv").read_text().splitlines()[1:-1]))
    masks = {row[10].strip() for row in rows if len(row) > 10}
    assert masks <= {"0x0000000000000000", "0x0000000000000001", "0x0000000000000004"}
    assert doc.decode_event_reasons("0x0000000000000004") == ["sw_power_cap"]


def test_real_doctor_run_recorded_its_findings():
    import json

    facts = json.loads((DAY2 / "doctor-facts.json").read_text())
    found = statuses(facts["gpuhost_findings"])
    assert found["doctor.clocks.sw_power_cap"] == "warn"
    assert found["doctor.versions"] == "pass"
    assert not [k for k, v in found.items() if v == "fail"]
