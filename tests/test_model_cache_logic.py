"""Decisions of role model_cache (plugins/plugin_utils/gpuhost_model_cache.py): the preflight
disk check, what the download unit may be given, its state and the start decision, the
progress line; and the disk check refusing on a real preflight run, before any change."""

from __future__ import annotations

import os
import re

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_model_cache import (
    GIB,
    MIB,
    disk_finding,
    duration,
    expected_size,
    parse_show,
    parse_timestamp,
    progress_line,
    start_action,
    systemd_run_argv,
    unit_state,
    validate_download,
)
from gpuhost_fakes import ROOT, run_playbook


def _finding(
    free_gib, size_gib=480, margin=20, partial=0, source="the serving profile's download_gib"
):
    return disk_finding(
        free_bytes=int(free_gib * GIB),
        probe_path="/var/cache",
        hf_home="/var/cache/gpuhost/huggingface",
        model="acme/big",
        size_gib=size_gib,
        size_source=source,
        margin_gib=margin,
        partial_bytes=int(partial * GIB),
    )


def test_disk_too_small_fails_naming_numbers_and_variables():
    f = _finding(300)
    assert f["status"] == "fail"
    assert f["check"] == "model_cache.disk"
    assert "300.0 GiB free" in f["message"]
    assert "~480 GiB" in f["message"] and "500.0 GiB needed" in f["message"]
    assert "model_cache_free_margin_gib=20" in f["message"]
    assert "the filesystem of /var/cache" in f["message"]
    assert "model_cache_hf_home" in f["fix"]


def test_disk_enough_passes_and_the_boundary_is_inclusive():
    assert _finding(500)["status"] == "pass"
    assert _finding(499.9)["status"] == "fail"


def test_an_interrupted_download_counts_as_already_there():
    assert _finding(300, partial=250)["status"] == "pass"
    assert "250.0 GiB already downloaded" in _finding(300, partial=250)["message"]
    # More on disk than expected never makes the need negative.
    assert _finding(20, partial=600)["status"] == "pass"
    assert _finding(19, partial=600)["status"] == "fail"


def test_unknown_size_checks_the_margin_only_and_warns():
    f = _finding(30, size_gib=0, source="unknown")
    assert f["status"] == "warn"
    assert "size unknown" in f["message"] and "model_cache_expected_size_gib" in f["fix"]
    assert _finding(10, size_gib=0, source="unknown")["status"] == "fail"


def test_expected_size_prefers_the_variable_then_the_profile():
    assert expected_size(12, 480) == (12.0, "model_cache_expected_size_gib")
    assert expected_size(0, 480) == (480.0, "the serving profile's download_gib")
    assert expected_size(0, 0) == (0.0, "unknown")


def test_bad_sizes_are_refused_naming_the_variable():
    with pytest.raises(ValueError, match=r"model_cache_expected_size_gib: got -1; allowed"):
        expected_size(-1, 480)
    with pytest.raises(ValueError, match=r"model_cache_free_margin_gib: got -3; allowed"):
        _finding(100, margin=-3)


def test_download_inputs_are_validated_before_they_reach_the_unit():
    good = dict(
        model="zai-org/GLM-5",
        revision="0123abcd",
        include=["*.safetensors"],
        env={"HF_ENDPOINT": "https://mirror.example:8443/hf"},
        cli="/opt/gpuhost/hf-venv/bin/hf",
        hf_home="/var/cache/gpuhost/huggingface",
    )
    assert validate_download(**good) == []
    bad = {
        "model": "acme/x; rm -rf /",
        "revision": "main%n",
        "include": ["a b"],
        "env": {"HF_TOKEN": "hf_x", "lower": "1", "OK": "$(id)"},
        "cli": "relative/hf",
        "hf_home": "/var/cache/with space",
    }
    errors = validate_download(**bad)
    names = [e.split(":")[0] for e in errors]
    assert names == [
        "model_cache_model_id",
        "model_cache_revision",
        "model_cache_include",
        "model_cache_hf_cli",
        "model_cache_hf_home",
        "model_cache_download_environment",
        "model_cache_download_environment",
        "model_cache_download_environment",
    ]
    assert all("allowed" in e for e in errors)
    # The token is never a value here: only its key is named.
    assert "hf_x" not in " ".join(errors)


def test_systemd_run_argv_runs_as_the_service_account_without_the_token():
    argv = systemd_run_argv(
        unit="gpuhost-model-download",
        user="gpuhost",
        group="gpuhost",
        cli="/opt/gpuhost/hf-venv/bin/hf",
        model="acme/m",
        revision="main",
        max_workers=8,
        include=["*.json"],
        env={"HF_HOME": "/c/hf"},
        hf_home="/c/hf",
        timeout_s=3600,
        python=["/opt/gpuhost/hf-venv/bin/python"],
        wrapper="/opt/gpuhost/libexec/gpuhost-hf-download",
        token_file="/etc/gpuhost/hf-token",
    )
    assert argv[0] == "systemd-run"
    assert "--uid=gpuhost" in argv and "--gid=gpuhost" in argv
    assert "--property=RemainAfterExit=yes" in argv
    assert "--property=ReadWritePaths=/c/hf" in argv
    assert "--property=StandardInput=file:/etc/gpuhost/hf-token" in argv
    tail = argv[argv.index("--") + 1 :]
    assert tail == [
        "/opt/gpuhost/hf-venv/bin/python",
        "-I",
        "/opt/gpuhost/libexec/gpuhost-hf-download",
        "/opt/gpuhost/hf-venv/bin/hf",
        "download",
        "acme/m",
        "--revision",
        "main",
        "--max-workers",
        "8",
        "--include=*.json",
    ]
    with pytest.raises(ValueError, match="model_cache_download_environment"):
        systemd_run_argv(
            unit="u",
            user="g",
            group="g",
            cli="/x/hf",
            model="a/b",
            revision="main",
            max_workers=1,
            include=[],
            env={"HF_TOKEN": "hf_secret"},
            hf_home="/c",
            timeout_s=60,
            python=["/usr/bin/python3"],
            wrapper="/w",
        )


SHOW = {
    "absent": "LoadState=not-found\nActiveState=inactive\nSubState=dead\nResult=success\n",
    "running": "LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\n",
    "succeeded": "LoadState=loaded\nActiveState=active\nSubState=exited\nResult=success\n"
    "ExecMainStatus=0\n",
    "failed": "LoadState=loaded\nActiveState=failed\nSubState=failed\nResult=exit-code\n"
    "ExecMainStatus=1\n",
}


@pytest.mark.parametrize("state", sorted(SHOW))
def test_unit_state_from_systemctl_show(state):
    assert unit_state(parse_show(SHOW[state])) == state


def test_exited_with_an_error_is_failed():
    text = SHOW["succeeded"].replace("ExecMainStatus=0", "ExecMainStatus=2")
    assert unit_state(parse_show(text)) == "failed"


@pytest.mark.parametrize(
    ("state", "marker", "action"),
    [
        ("absent", False, "start"),
        ("absent", True, "done"),
        ("running", False, "wait"),  # an interrupted run left it running: follow it
        ("running", True, "wait"),
        ("succeeded", False, "finish"),
        ("failed", False, "restart"),  # resumes from the *.incomplete files
        ("failed", True, "done"),
    ],
)
def test_start_action(state, marker, action):
    assert start_action(state, marker) == action


def test_timestamps_and_progress():
    assert parse_timestamp("Tue 2026-12-01 17:00:32 UTC") == "2026-12-01T17:00:32+00:00"
    assert parse_timestamp("") == "" and parse_timestamp("n/a") == ""
    assert duration(59) == "59s" and duration(61) == "1m01s" and duration(7322) == "2h02m"
    line = progress_line(
        label="acme/m@main",
        got=256 * MIB,
        expected=1024 * MIB,
        rate=16 * MIB,
        elapsed=16,
        incomplete=2,
    )
    assert line == (
        "acme/m@main: 256.0 MiB of ~1.0 GiB (25 %), 16.0 MiB/s, ETA 48s, "
        "2 file(s) in progress (16s)"
    )


def test_preflight_refuses_a_cache_filesystem_too_small_before_any_change():
    """The real preflight playbook on this machine (connection local): a model bigger than
    the cache's disk stops the run at the gate, changed=0, naming numbers and variables."""
    proc = run_playbook(
        [
            "playbooks/preflight.yml",
            "-i",
            "inventory/local",
            "-e",
            "model_cache_expected_size_gib=1000000",
            "-e",
            "model_cache_hf_cli=/bin/true",
            "-e",
            "gpuhost_cache_dir=/tmp/gpuhost-blank-disk-test",
        ],
        ROOT / ".cache" / "test-facts-model-cache",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+).*failed=(\d+)", out)
    assert recap and recap.group(2) == "0" and recap.group(3) == "1", out
    assert re.search(
        r"model_cache\.disk \| .*GiB free for /tmp/gpuhost-blank-disk-test/huggingface", out
    ), out
    assert "~1e+06 GiB (model_cache_expected_size_gib)" in out, out
    assert not os.path.exists("/tmp/gpuhost-blank-disk-test")
