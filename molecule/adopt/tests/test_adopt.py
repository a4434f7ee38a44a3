"""gpuhost adopt and adopt --apply against the hand-started stand-in prepare left (molecule.yml).

In file order, each through the gpuhost CLI as a user runs it: the proposal classifies every
flag and variable as docs/adopt.md's worked example says; --apply --check changes nothing; a
cutover whose managed unit fails its gate brings the old command back exactly (argv,
environment byte for byte, working directory, user, its log); then the cutover that passes:
the managed unit serves the same model on the same port, the old process is gone, nothing
was downloaded.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", "")
PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
HOST = "gpuhost-adopt-deb12"
MODEL = "lukealonso/GLM-5-NVFP4"
KEY = "gpuhost-test-adoptkey-2b7e9c41d0"  # host_vars
HF_TOKEN = "hf_adoptTestToken4d1f8e07"  # prepare.yml
UNIT = "/etc/systemd/system/sglang-server.service"
SERVICE = "sglang-server"
# What systemd adds to a service's environment (systemd.exec(5), "Environment Variables in
# Spawned Processes"; docs/adopt.md, the way back).
SYSTEMD_ADDS = {"INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "HOME", "USER",
                "LOGNAME", "SHELL", "PATH", "LANG"}  # fmt: skip
OUTPUTS: list[str] = []

pytestmark = pytest.mark.skipif(not INVENTORY, reason="runs under molecule verify")


def adopt(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    """`gpuhost adopt -i INV ARGS --json` from this checkout: exit code, report, all output."""
    gpuhost = Path(sys.executable).parent / "gpuhost"
    cmd = [str(gpuhost), "--project-dir", str(PROJECT), "--runs-dir", str(tmp_path)]
    cmd += ["adopt", "-i", INVENTORY, *args, "--json"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT / "src")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    OUTPUTS.append(proc.stdout + proc.stderr)
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, report, proc.stdout + proc.stderr


def old_pid(host) -> int:
    return int(host.check_output("cat /home/ml/sglang.pid"))


def server_pids(host) -> list[int]:
    out = host.run("pgrep -u ml -f 'sglang.launch_server'").stdout.split()
    return sorted(int(p) for p in out)


def proc_of(host, pid: int) -> dict:
    """argv, environment (as root, byte for byte), cwd and user of a process."""
    environ = base64.b64decode(host.check_output(f"base64 -w0 /proc/{pid}/environ"))
    cmdline = base64.b64decode(host.check_output(f"base64 -w0 /proc/{pid}/cmdline"))
    return {
        "argv": cmdline.split(b"\0"),
        "env": dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item),
        "cwd": host.check_output(f"readlink /proc/{pid}/cwd"),
        "user": host.check_output(f"ps -o user= -p {pid}").strip(),
    }


def health(host, port: int = 8000) -> str:
    return host.run(
        f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health"
    ).stdout


# --- the proposal -------------------------------------------------------------------------------

ITEM = re.compile(r"^# (kept|dropped|changed)\s+(flag|env|package) ([^=\s]+)=")
EXPECTED = {
    "--model-path": "kept", "--tp": "kept", "--port": "kept", "--host": "changed",
    "--kv-cache-dtype": "changed", "--fp8-gemm-backend": "dropped",
    "--nsa-decode-backend": "dropped", "--nsa-prefill-backend": "dropped",
    "--enable-flashinfer-allreduce-fusion": "dropped", "--disable-custom-all-reduce": "kept",
    "--mem-fraction-static": "kept", "--max-running-requests": "kept", "--quantization": "kept",
    "--attention-backend": "kept", "--moe-runner-backend": "kept", "--reasoning-parser": "kept",
    "--tool-call-parser": "kept", "--trust-remote-code": "kept",
    "NCCL_IB_DISABLE": "kept", "NCCL_P2P_LEVEL": "dropped",
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS": "dropped", "NCCL_MIN_NCHANNELS": "changed",
    "OMP_NUM_THREADS": "kept", "SAFETENSORS_FAST_GPU": "kept", "CUDA_HOME": "kept",
    "HF_TOKEN": "changed",
}  # fmt: skip


def test_adopt_proposes_the_reference_settings(host, tmp_path):
    rc, report, out = adopt(tmp_path)
    assert rc == 0, out[-4000:]
    (path,) = report["adopt"][HOST]
    text = Path(path).read_text()
    found = {m.group(3): m.group(1) for line in text.splitlines() if (m := ITEM.match(line))}
    assert {k: found.get(k) for k in EXPECTED} == EXPECTED
    settings = yaml.safe_load(text.split("\n---\n", 1)[1])
    assert settings["sglang_server_port"] == 8000 and settings["sglang_server_host"] == "0.0.0.0"
    assert settings["sglang_server_profile"] == "glm5-nvfp4-8x-rtx-pro-6000"
    assert settings["sglang_server_model_id"] == MODEL
    assert re.fullmatch(r"[0-9a-f]{40}", settings["sglang_server_revision"])
    assert HF_TOKEN not in text
    assert server_pids(host) == [old_pid(host)]  # read-only


def test_apply_check_changes_nothing(host, tmp_path):
    rc, report, out = adopt(tmp_path, "--apply", "--check")
    assert rc == 0, out[-4000:]
    assert report["check"] is True
    assert server_pids(host) == [old_pid(host)] and health(host) == "200"
    assert not host.file(UNIT).exists
    assert report["adopt_apply"][HOST]["check_mode"] is True


# --- the way back -------------------------------------------------------------------------------


def test_a_failed_gate_brings_the_old_command_back_exactly(host, tmp_path):
    pid = old_pid(host)
    before = proc_of(host, pid)
    log_before = host.file("/home/ml/sglang.log").content
    fault = json.dumps({"sglang_server_extra_env": {"SGLANG_STANDIN_FAULT": "never-healthy"}})
    rc, _, out = adopt(tmp_path, "--apply", "-e", fault)
    assert rc == 1, out[-4000:]
    said = " ".join(out.replace("\\n", " ").replace('\\"', '"').split())
    assert "the cutover failed (The new SGLang configuration failed at" in said, out[-4000:]
    assert "answers /health again" in said
    assert not host.service(SERVICE).is_running and not host.service(SERVICE).is_enabled
    (back,) = server_pids(host)
    assert back != pid
    after = proc_of(host, back)
    assert after["argv"] == before["argv"]
    assert after["cwd"] == before["cwd"] == "/home/ml" and after["user"] == "ml"
    for name, value in before["env"].items():
        assert after["env"].get(name) == value, name
    assert b"ADOPT_QUOTED" in before["env"] and before["env"][b"HF_TOKEN"] == HF_TOKEN.encode()
    assert {k.decode() for k in after["env"]} - {k.decode() for k in before["env"]} <= SYSTEMD_ADDS
    assert health(host) == "200"
    # Appended to the log it wrote before, by the user.
    log = host.file("/home/ml/sglang.log")
    assert log.content.startswith(log_before) and len(log.content) > len(log_before)
    assert log.user == "ml"
    host.run(f"echo {back} > /home/ml/sglang.pid")
    # The record is root's alone and no output of the run holds the environment.
    assert host.file(f"/var/lib/gpuhost/adopt/pid{pid}.json").mode == 0o600
    assert host.file("/var/lib/gpuhost/adopt").mode == 0o700
    assert HF_TOKEN not in out


# --- the cutover --------------------------------------------------------------------------------


def test_apply_serves_the_same_model_from_the_managed_unit(host, tmp_path):
    pid = old_pid(host)
    rc, report, out = adopt(tmp_path, "--apply")
    assert rc == 0, out[-4000:]
    assert server_pids(host) == [] and not host.file(f"/proc/{pid}").exists
    assert host.service(SERVICE).is_running
    main_pid = host.check_output(f"systemctl show -P MainPID {SERVICE}")
    assert host.check_output(f"ps -o user= -p {main_pid}").strip() == "gpuhost"
    assert health(host) == "200"  # the port is kept
    models = host.check_output(
        f"curl -s -H 'Authorization: Bearer {KEY}' http://127.0.0.1:8000/v1/models"
    )
    assert MODEL in models
    # Nothing downloaded: the hf stand-in never ran, and model_cache says 0 bytes.
    assert not host.file("/var/log/hf-standin.jsonl").exists
    markers = host.check_output(
        "cat /var/cache/gpuhost/huggingface/gpuhost-complete/lukealonso--GLM-5-NVFP4@*.json"
    )
    assert json.loads(markers)["bytes_downloaded"] == 0
    done = report["adopt_apply"][HOST]
    assert done["ok"] and done["old_pid"] == pid and str(done["port"]) == "8000"
    assert any("Authorization: Bearer" in line for line in done["clients"])
    # The models lock beside the inventory records the commit it served for its branch (main).
    pinned = yaml.safe_load((Path(INVENTORY).parent / "models.lock.yml").read_text())
    sha = pinned["models"][MODEL]["main"]["sha"]
    assert re.fullmatch(r"[0-9a-f]{40}", sha)
    assert any(f"models lock: {MODEL} main -> {sha}" in line for line in report["adopt_lock"])


def test_no_secret_in_any_output():
    for out in OUTPUTS:
        assert HF_TOKEN not in out and KEY not in out
