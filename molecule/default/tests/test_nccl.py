"""What role nccl leaves on a host without GPUs (the default scenario's containers): an env
file the server unit can read, that says plainly no GPU is present and sets nothing, and the
all-reduce sweep installed for later runs (run by molecule's testinfra)."""

import re

SERVICE_GROUP = "gpuhost"


def test_nccl_env_file(host):
    env = host.file("/etc/gpuhost/nccl.env")
    assert env.is_file
    assert env.user == "root"
    assert env.group == SERVICE_GROUP
    assert env.mode == 0o640
    text = env.content_string
    lines = text.splitlines()
    # {{ ansible_managed | comment }}: a "#" frame around the managed line.
    assert lines[:3] == ["#", "# Ansible managed", "#"]
    assert "No GPU present" in text
    assert "topology class: none" in text


def test_nccl_env_file_sets_nothing_without_gpus(host):
    text = host.file("/etc/gpuhost/nccl.env").content_string
    assignments = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert assignments == []
    # Every line is one systemd's EnvironmentFile= accepts: a comment or KEY=VALUE.
    for line in text.splitlines():
        assert line == "" or line.startswith("#") or re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", line)


def test_allreduce_sweep_installed(host):
    sweep = host.file("/opt/gpuhost/libexec/gpuhost_allreduce_sweep.py")
    assert sweep.is_file
    assert sweep.user == "root"
    assert sweep.mode == 0o755
    assert sweep.content_string.startswith("#!/usr/bin/env python3")
